"""Hidden suite for `dpo_loss`: the sequence log-probabilities of a causal LM's responses
(shift by one, labels left out at ignore_index, sum or average) and the DPO loss of a batch
of preference pairs (sigmoid, cDPO label smoothing, IPO) with its detached rewards, as
TRL's DPOTrainer computes them (EXERCISES_CANON.md section 11).

The references are the formulas of the statement, computed here in float64 with torch's
log_softmax and logsigmoid. Inputs are float64 unless a check says float32; a float32
answer is compared with the float64 computation on the same inputs. Checks of one feature
leave the others at their defaults: the loss tests pass log-probabilities directly (so a
bug in sequence_logps costs nothing there), smoothing is 0 outside its level, and the
from-scratch checks call both functions once with default arguments.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn import functional as F

from grader.core.outcomes import CandidateRaised
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch

LOGPS, DPO = "sequence_logps", "dpo_loss"
LOSSES = ("binary_cross_entropy_with_logits", "binary_cross_entropy", "soft_margin_loss",
          "cross_entropy", "nll_loss")  # fmt: skip

exercise = Exercise(
    id="dpo_loss",
    tags=("alignment", "losses"),
    minutes=35,
    title="DPO loss from sequence log-probs: shift and mask, cDPO, IPO, rewards",
    seed="-",
    levels=[
        "shapes",
        "log-probs",
        "sigmoid loss",
        "label smoothing",
        "ipo",
        "gradients",
        "robustness",
        "from scratch",
    ],
    defines=(LOGPS, DPO),
    # torch losses that do a step of the exercise: BCE with logits is the cDPO loss
    # (target 1 - eps), soft margin is -logsigmoid, cross-entropy / nll the gather and mask
    forbidden=(
        *LOSSES,
        "BCEWithLogitsLoss",
        "BCELoss",
        "SoftMarginLoss",
        "CrossEntropyLoss",
        "NLLLoss",
    ),
    watch=Watch(
        what="torch loss",
        functions=LOSSES,
        ops=("binary_cross_entropy", "soft_margin_loss", "nll_loss", "cross_entropy"),
        instrument=tuple(f"torch.nn.functional:{name}" for name in LOSSES),
        private=r"binary_cross_entropy|soft_margin|nll_loss|cross_entropy",
    ),
)

F32, F64 = lib.F32, lib.F64
B, T, V = 4, 7, 11  # T != V, so a shift or gather on the wrong axis shows
IGNORE = -100
# each row's (prompt, end): labels[:prompt] and labels[end:] are ignored; ragged, so sum,
# mean over T - 1 and mean over the kept tokens all differ
SPANS = ((2, 7), (3, 5), (1, 6), (2, 4))


# --- inputs and references (grader's process, float64) ------------------------------------


def lm_logits(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F64):
    """Seeded logits (normal noise times `scale`)."""
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def lm_labels(seed: int, spans=SPANS, t: int = T, pad: int = IGNORE, low: int = 0):
    """Seeded token ids in [low, V), with `pad` outside each row's (prompt, end) span."""
    ids = lib.randint(low, V, len(spans), t, seed=seed)
    for row, (start, end) in enumerate(spans):
        ids[row, :start] = pad
        ids[row, end:] = pad
    return ids


def ref_logps(logits, labels, average=False, ignore_index=IGNORE):
    """The statement's sequence log-probabilities, in float64."""
    targets = labels[:, 1:]
    keep = targets != ignore_index
    logp = torch.log_softmax(logits.double()[:, :-1], dim=-1)
    picked = logp.gather(-1, torch.where(keep, targets, 0).unsqueeze(-1)).squeeze(-1)
    total = (picked * keep).sum(-1)
    return total / keep.sum(-1) if average else total


def logps_inputs(seed: int, n: int = 6, scale: float = 10.0, dtype=F64):
    """Four seeded (n,) sequence log-probabilities (policy chosen, policy rejected, ref
    chosen, ref rejected): negative, of magnitude `scale`, their margins of both signs."""
    return tuple(
        -(lib.randn(n, seed=seed + i, dtype=F64).abs() * scale + 1.0).to(dtype) for i in range(4)
    )


def ref_dpo(pc, pr, rc, rr, beta=0.1, label_smoothing=0.0, loss_type="sigmoid"):
    """The statement's (loss, chosen_rewards, rejected_rewards), in float64."""
    pc, pr, rc, rr = (t.double() for t in (pc, pr, rc, rr))
    z = (pc - pr) - (rc - rr)
    if loss_type == "ipo":
        losses = (z - 1 / (2 * beta)) ** 2
    else:
        eps = label_smoothing
        losses = -F.logsigmoid(beta * z) * (1 - eps) - F.logsigmoid(-beta * z) * eps
    return losses.mean(), beta * (pc - rc), beta * (pr - rr)


def with_margins(z: torch.Tensor, dtype=F64):
    """Inputs whose z is exactly `z` (policy chosen = z, the other three 0)."""
    zero = torch.zeros_like(z, dtype=dtype)
    return z.to(dtype), zero, zero.clone(), zero.clone()


# --- calling the candidate ---------------------------------------------------------------


def described(name: str, kwargs: dict) -> str:
    """`name(...)` with the keyword arguments given."""
    return f"{name}(...{''.join(f', {k}={v!r}' for k, v in kwargs.items())})"


def triple(answer: Any, what: str) -> tuple[Any, Any, Any]:
    """dpo_loss's answer as (loss, chosen_rewards, rejected_rewards), else an Interface failure."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise checks.Interface(
            f"{what}: got {checks.describe(answer)}, want a tuple "
            "(loss, chosen_rewards, rejected_rewards)"
        )
    return answer[0], answer[1], answer[2]


def dpo_calls(kernel, inputs, settings: list[dict]) -> list[tuple[Any, Any, Any]]:
    """dpo_loss(*inputs, **kwargs) for each keyword set, in one round trip."""
    answers = kernel.many(kernel.get(DPO), [(tuple(inputs), kw) for kw in settings])
    return [triple(a, described(DPO, kw)) for a, kw in zip(answers, settings, strict=True)]


def loss_matches(kernel, inputs, settings: list[dict], where: str = "") -> None:
    """The loss for each keyword set matches the statement's (a 0-dim tensor)."""
    for (loss, _, _), kw in zip(dpo_calls(kernel, inputs, settings), settings, strict=True):
        what = f"the loss of {described(DPO, kw)} {where}".rstrip()
        checks.close(checks.tensor(loss, what, ()), ref_dpo(*inputs, **kw)[0], what)


def logps_match(kernel, logits, labels, settings: list[dict], where: str) -> None:
    """sequence_logps for each keyword set matches the statement's."""
    calls = [((logits, labels), kw) for kw in settings]
    for got, kw in zip(kernel.many(kernel.get(LOGPS), calls), settings, strict=True):
        what = f"{described(LOGPS, kw)} {where}"
        checks.close(checks.tensor(got, what, (logits.shape[0],)), ref_logps(logits, labels, **kw),
                     what)  # fmt: skip


def dtype_is(value: Any, dtype: torch.dtype, what: str) -> None:
    """`value` is a tensor of `dtype`."""
    if checks.tensor(value, what).dtype != dtype:
        raise checks.Failed(f"{what} has dtype {value.dtype}, want {dtype} (the inputs' dtype)")


def unchanged(kernel, name: str, tensors: dict[str, torch.Tensor], kwargs: dict) -> None:
    """name(*tensors, **kwargs) leaves every tensor argument as it was (held in the kernel)."""
    held = [kernel.hold(t.clone(), label) for label, t in tensors.items()]
    kernel.get(name)(*held, **kwargs)
    for h, (label, t) in zip(held, tensors.items(), strict=True):
        checks.equal(kernel.attribute(h, "data"), t, f"{label} after {described(name, kwargs)}")


# --- shapes -------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def logps_shape_and_dtype(kernel):
    """sequence_logps returns one value per row, (B,), in the logits' dtype (float64, float32)."""
    labels = lib.randint(0, V, B, T, seed=1)
    for dtype in (F64, F32):
        got = kernel.get(LOGPS)(lm_logits(B, T, V, seed=1, dtype=dtype), labels)
        what = f"{LOGPS} of {str(dtype)[6:]} logits (B, T, V) = {(B, T, V)}"
        checks.tensor(got, what, (B,))
        dtype_is(got, dtype, what)


@exercise.check("shapes", hidden=False)
def dpo_returns_loss_and_rewards(kernel):
    """dpo_loss returns (loss 0-dim, chosen_rewards (B,), rejected_rewards (B,)) in the
    inputs' dtype (float64, float32)."""
    for dtype in (F64, F32):
        ((loss, chosen, rejected),) = dpo_calls(kernel, logps_inputs(2, n=5, dtype=dtype), [{}])
        where = f"for float{str(dtype)[-2:]} inputs of shape (5,)"
        for value, name, shape in ((loss, "loss", ()), (chosen, "chosen_rewards", (5,)),
                                   (rejected, "rejected_rewards", (5,))):  # fmt: skip
            checks.tensor(value, f"{name} {where}", shape)
            dtype_is(value, dtype, f"{name} {where}")


# --- log-probs ----------------------------------------------------------------------------


@exercise.check("log-probs", points=2, hidden=False)
def logps_every_label_kept(kernel):
    """No label ignored: the sum over t of log_softmax(logits[:, t])[labels[:, t + 1]]."""
    labels = lib.randint(0, V, B, T, seed=3)
    logps_match(kernel, lm_logits(B, T, V, seed=3), labels, [{}], "with every label kept")


@exercise.check("log-probs", points=2)
def logps_prompt_and_padding(kernel):
    """Labels -100 on each row's prompt and padding (ragged): only the kept tokens add up."""
    logps_match(kernel, lm_logits(B, T, V, seed=4), lm_labels(seed=4), [{}],
                "with a -100 prompt and padding")  # fmt: skip


@exercise.check("log-probs")
def logps_padding_only(kernel):
    """Padding (-100) at the end of each row only, no prompt: the kept tokens add up."""
    spans = ((0, 7), (0, 3), (0, 5), (0, 2))
    logps_match(kernel, lm_logits(B, T, V, seed=5), lm_labels(seed=5, spans=spans), [{}],
                "with padding at the end only")  # fmt: skip


@exercise.check("log-probs", points=2)
def logps_average(kernel):
    """average=True: each row's sum divided by its own number of kept tokens."""
    logps_match(kernel, lm_logits(B, T, V, seed=6), lm_labels(seed=6), [{"average": True}],
                "with a -100 prompt and padding")  # fmt: skip


@exercise.check("log-probs")
def logps_average_every_label_kept(kernel):
    """average=True with every label kept: each row's sum divided by T - 1."""
    labels = lib.randint(0, V, B, T, seed=9)
    logps_match(kernel, lm_logits(B, T, V, seed=9), labels, [{"average": True}],
                "with every label kept")  # fmt: skip


@exercise.check("log-probs")
def logps_custom_ignore_index(kernel):
    """ignore_index=3 (a valid token id): labels equal to 3 are left out, -100 is not used."""
    logits, labels = lm_logits(B, T, V, seed=7), lm_labels(seed=7, pad=3, low=4)
    logps_match(kernel, logits, labels, [{"ignore_index": 3}], "with 3 as the ignored id")


@exercise.check("log-probs")
def logps_ignore_index_zero(kernel):
    """ignore_index=0 (falsy) is honoured: labels equal to 0 are left out."""
    logits, labels = lm_logits(B, T, V, seed=8), lm_labels(seed=8, pad=0, low=1)
    logps_match(kernel, logits, labels, [{"ignore_index": 0}], "with 0 as the ignored id")


# --- sigmoid loss -------------------------------------------------------------------------


@exercise.check("sigmoid loss", points=2, hidden=False)
def sigmoid_loss(kernel):
    """The default loss (sigmoid, beta=0.1): mean of -log σ(β z) over the batch."""
    loss_matches(kernel, logps_inputs(10), [{}])


@exercise.check("sigmoid loss", points=2)
def sigmoid_loss_other_beta(kernel):
    """beta=0.5 and beta=2.0: the same loss with β inside the log-sigmoid."""
    loss_matches(kernel, logps_inputs(11), [{"beta": 0.5}, {"beta": 2.0}])


@exercise.check("sigmoid loss", points=2)
def rewards(kernel):
    """chosen_rewards = β (policy_chosen - ref_chosen), rejected_rewards = β (policy_rejected
    - ref_rejected), for beta=0.1 and beta=0.5."""
    inputs = logps_inputs(12)
    settings: list[dict] = [{}, {"beta": 0.5}]
    for (_, chosen, rejected), kw in zip(
        dpo_calls(kernel, inputs, settings), settings, strict=True
    ):
        _, want_chosen, want_rejected = ref_dpo(*inputs, **kw)
        checks.close(chosen, want_chosen, f"chosen_rewards of {described(DPO, kw)}")
        checks.close(rejected, want_rejected, f"rejected_rewards of {described(DPO, kw)}")


@exercise.check("sigmoid loss")
def loss_is_the_batch_mean(kernel):
    """The loss of a batch of 6 is the mean of the losses of its pairs taken one at a time."""
    inputs = logps_inputs(13)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((tuple(x[i : i + 1] for x in inputs)), {}) for i in range(6)
    ]
    alone = [triple(a, f"{DPO} of pair {i} alone")[0]
             for i, a in enumerate(kernel.many(kernel.get(DPO), calls))]  # fmt: skip
    each = torch.stack([checks.tensor(a, f"the loss of pair {i} alone", ()) for i, a in
                        enumerate(alone)])  # fmt: skip
    ((loss, _, _),) = dpo_calls(kernel, inputs, [{}])
    checks.close(checks.tensor(loss, "the loss of 6 pairs", ()), each.mean(),
                 "the loss of 6 pairs vs the mean of their losses one at a time")  # fmt: skip


# --- label smoothing ----------------------------------------------------------------------


@exercise.check("label smoothing", points=2, hidden=False)
def smoothed_loss(kernel):
    """label_smoothing=0.1 and 0.3 (cDPO): -(1-ε) log σ(β z) - ε log σ(-β z), averaged."""
    loss_matches(kernel, logps_inputs(20), [{"label_smoothing": 0.1}, {"label_smoothing": 0.3}])


@exercise.check("label smoothing")
def smoothing_zero_is_plain_dpo(kernel):
    """label_smoothing=0.0, given explicitly, is plain DPO (margins up to β z = ±40)."""
    z = torch.tensor([40.0, -40.0, 3.0, -0.5, 25.0, -12.0], dtype=F64) * 10
    loss_matches(kernel, with_margins(z), [{"label_smoothing": 0.0}], "for β z up to ±40")


@exercise.check("label smoothing")
def zero_margin_gives_log_2(kernel):
    """z = 0 for every pair: the loss is log 2 whatever the smoothing (0.0, 0.2, 0.5)."""
    inputs = with_margins(torch.zeros(4, dtype=F64))
    settings = [{"label_smoothing": e} for e in (0.0, 0.2, 0.5)]
    for (loss, _, _), kw in zip(dpo_calls(kernel, inputs, settings), settings, strict=True):
        checks.close(loss, torch.tensor(math.log(2), dtype=F64),
                     f"the loss of {described(DPO, kw)} at z = 0 vs log 2")  # fmt: skip


# --- ipo ----------------------------------------------------------------------------------


@exercise.check("ipo", points=2, hidden=False)
def ipo_loss(kernel):
    """loss_type="ipo" (beta=0.1): mean of (z - 1/(2β))², the target margin 5."""
    loss_matches(kernel, logps_inputs(30), [{"loss_type": "ipo"}])


@exercise.check("ipo")
def ipo_beta_one(kernel):
    """loss_type="ipo", beta=1.0: mean of (z - 0.5)² (β does not scale z)."""
    loss_matches(kernel, logps_inputs(31, scale=1.0), [{"loss_type": "ipo", "beta": 1.0}])


@exercise.check("ipo")
def ipo_zero_at_the_target(kernel):
    """loss_type="ipo": margins z = 1/(2β) exactly (beta=0.25, z = 2) give a loss of 0."""
    inputs = with_margins(torch.full((3,), 2.0, dtype=F64))
    ((loss, _, _),) = dpo_calls(kernel, inputs, [{"loss_type": "ipo", "beta": 0.25}])
    lib.exactly_zero(checks.tensor(loss, "the IPO loss at z = 1/(2β)", ()),
                     "the IPO loss at z = 1/(2β)")  # fmt: skip


@exercise.check("ipo")
def ipo_ignores_label_smoothing(kernel):
    """loss_type="ipo" with label_smoothing=0.3: the same as without (IPO is not smoothed)."""
    loss_matches(kernel, logps_inputs(32), [{"loss_type": "ipo", "label_smoothing": 0.3}])


# --- gradients ----------------------------------------------------------------------------


def loss_gradient_matches(kernel, inputs, what: str, **kwargs) -> None:
    """d loss / d (policy chosen, policy rejected) matches autograd through the statement's."""
    lib.gradients_match(kernel, kernel.get(DPO), inputs, lambda *a, **k: ref_dpo(*a, **k)[0],
                        [0, 1], what, kwargs=kwargs, output_path=[0],
                        names=["policy_chosen_logps", "policy_rejected_logps"])  # fmt: skip


@exercise.check("gradients", points=2)
def loss_gradient(kernel):
    """d loss / d policy log-probs (defaults) matches float64 autograd."""
    loss_gradient_matches(kernel, logps_inputs(40), f"the loss of {DPO}(...)")


@exercise.check("gradients")
def smoothed_loss_gradient(kernel):
    """d loss / d policy log-probs with label_smoothing=0.2 matches float64 autograd."""
    kw = {"label_smoothing": 0.2}
    loss_gradient_matches(kernel, logps_inputs(41), f"the loss of {described(DPO, kw)}", **kw)


@exercise.check("gradients", points=2)
def rewards_are_detached(kernel):
    """The rewards carry no gradient (detached), while the loss does."""
    inputs = logps_inputs(42)
    cotangent = torch.ones(6, dtype=F64)
    for index, name in ((1, "chosen_rewards"), (2, "rejected_rewards")):
        try:
            kernel.grad(kernel.get(DPO), inputs, {}, wrt=[0, 1], cotangent=cotangent,
                        output_path=[index], params=False)  # fmt: skip
        except CandidateRaised as error:
            if error.not_implemented or error.interface:
                raise
            if "does not require grad" not in error.text:
                raise
            continue
        raise checks.Failed(f"{name} carries a gradient to the policy log-probs: want it "
                            "detached (.detach())")  # fmt: skip


@exercise.check("gradients", points=2)
def logps_gradient(kernel):
    """d sequence_logps / d logits (every label kept) matches float64 autograd."""
    logits, labels = lm_logits(B, T, V, seed=43), lib.randint(0, V, B, T, seed=43)
    lib.gradients_match(kernel, kernel.get(LOGPS), (logits, labels), ref_logps, [0], LOGPS,
                        names=["logits"])  # fmt: skip


# --- robustness ---------------------------------------------------------------------------


@exercise.check("robustness", points=2)
def huge_margins_float64(kernel):
    """β z = ±1000 (float64): the loss is finite and exact (about 500 per pair that loses)."""
    z = torch.tensor([10000.0, -10000.0, 5000.0, -2500.0], dtype=F64)
    inputs = with_margins(z)
    ((loss, _, _),) = dpo_calls(kernel, inputs, [{}])
    what = "the loss for β z = ±1000"
    checks.finite(checks.tensor(loss, what, ()), what)
    checks.close(loss, ref_dpo(*inputs)[0], what)


@exercise.check("robustness")
def large_margins_float32(kernel):
    """β z = ±200 in float32: the loss is finite and matches the float64 computation."""
    inputs = with_margins(torch.tensor([2000.0, -2000.0, 300.0, -50.0]), dtype=F32)
    ((loss, _, _),) = dpo_calls(kernel, inputs, [{}])
    what = "the loss of float32 inputs for β z = ±200"
    checks.finite(checks.tensor(loss, what, ()), what)
    checks.close(loss, ref_dpo(*inputs)[0], what)


@exercise.check("robustness", points=2)
def large_logps_float64(kernel):
    """Log-probabilities near -1e4 that differ by units (float64): a float64-accurate loss
    (no float32 step inside)."""
    base = -1e4 - lib.randn(6, seed=50, dtype=F64).abs() * 100
    inputs = tuple(base + lib.randn(6, seed=51 + i, dtype=F64) * 3 for i in range(4))
    ((loss, _, _),) = dpo_calls(kernel, inputs, [{}])
    checks.close(loss, ref_dpo(*inputs)[0], "the loss of log-probs near -1e4")


@exercise.check("robustness", points=2)
def logps_of_large_logits(kernel):
    """Logits of magnitude 1e4 (float64): sequence_logps is finite and float64-accurate."""
    logits, labels = lm_logits(B, T, V, seed=52, scale=1e4), lib.randint(0, V, B, T, seed=52)
    got = kernel.get(LOGPS)(logits, labels)
    what = f"{LOGPS} of logits of magnitude 1e4"
    checks.finite(checks.tensor(got, what, (B,)), what)
    checks.close(got, ref_logps(logits, labels), what)


@exercise.check("robustness")
def beta_zero(kernel):
    """beta=0.0 (falsy) is honoured: the sigmoid loss is log 2 for any margins."""
    ((loss, _, _),) = dpo_calls(kernel, logps_inputs(53), [{"beta": 0.0}])
    checks.close(loss, torch.tensor(math.log(2), dtype=F64), "the loss with beta=0.0 vs log 2")


@exercise.check("robustness")
def batch_of_one(kernel):
    """B = 1: sequence_logps gives shape (1,), dpo_loss a 0-dim loss and (1,) rewards."""
    logits, labels = lm_logits(1, T, V, seed=54), lib.randint(0, V, 1, T, seed=54)
    logps_match(kernel, logits, labels, [{}], "for B = 1")
    inputs = logps_inputs(55, n=1)
    ((loss, chosen, rejected),) = dpo_calls(kernel, inputs, [{}])
    checks.close(checks.tensor(loss, "the loss for B = 1", ()), ref_dpo(*inputs)[0],
                 "the loss for B = 1")  # fmt: skip
    checks.tensor(chosen, "chosen_rewards for B = 1", (1,))
    checks.tensor(rejected, "rejected_rewards for B = 1", (1,))


@exercise.check("robustness")
def logps_leaves_inputs_unchanged(kernel):
    """sequence_logps leaves logits and labels (with -100 entries) unchanged, for
    average=False and True."""
    logits, labels = lm_logits(B, T, V, seed=56), lm_labels(seed=56)
    for kw in ({}, {"average": True}):
        unchanged(kernel, LOGPS, {"logits": logits, "labels": labels}, kw)


@exercise.check("robustness")
def dpo_leaves_inputs_unchanged(kernel):
    """dpo_loss leaves its four inputs unchanged: sigmoid, smoothed and IPO."""
    names = ("policy_chosen_logps", "policy_rejected_logps", "ref_chosen_logps",
             "ref_rejected_logps")  # fmt: skip
    tensors = dict(zip(names, logps_inputs(57), strict=True))
    for kw in ({}, {"label_smoothing": 0.2}, {"loss_type": "ipo"}):
        unchanged(kernel, DPO, tensors, kw)


@exercise.check("robustness")
def non_contiguous_inputs(kernel):
    """Non-contiguous logits, labels and log-probabilities give the same answers."""
    logits, labels = lm_logits(B, T, V, seed=58), lib.randint(0, V, B, T, seed=58)
    logps_match(kernel, lib.noncontiguous(logits), lib.noncontiguous(labels), [{}],
                "for non-contiguous logits and labels")  # fmt: skip
    inputs = logps_inputs(59)
    loss_matches(kernel, tuple(lib.noncontiguous(x) for x in inputs), [{}],
                 "for non-contiguous log-probs")  # fmt: skip


@exercise.check("robustness")
def unknown_loss_type(kernel):
    """loss_type="hinge" (not in the statement) raises ValueError."""
    lib.raises(lambda *a: kernel.get(DPO)(*a, loss_type="hinge"), logps_inputs(60), "ValueError",
               f"{DPO}(..., loss_type='hinge')")  # fmt: skip


# --- from scratch -------------------------------------------------------------------------


def run_both(kernel) -> None:
    """One call of each function with default arguments, so a stub answers first (the watch
    saw every call the other tests made)."""
    kernel.get(LOGPS)(lm_logits(2, 4, 5, seed=61), torch.tensor([[1, 2, 3, 4], [0, 1, 2, 3]]))
    kernel.get(DPO)(*logps_inputs(62, n=2))


@exercise.check("from scratch", points=2)
def no_builtin_loss(kernel):
    """Neither the source nor the run uses torch's BCE, soft-margin, cross-entropy or NLL losses."""
    lib.no_builtin(kernel, exercise, lambda: run_both(kernel))
