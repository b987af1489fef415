"""Hidden suite for `cross_entropy`: a stable log-softmax and the cross-entropy loss with
ignore_index, label smoothing and reduction, as torch's F.cross_entropy defines them, for
(N, C) and (B, T, C) logits with the classes on the last axis.

The reference is torch's, computed here in the grader's process on the same inputs: for
(B, T, C) logits it is F.cross_entropy of the flattened (B*T, C) logits (F.cross_entropy
itself takes the classes on axis 1, and with T == C silently computes another loss), and
int32 targets reach it cast to int64 (F.cross_entropy rejects them). Inputs are float64
unless a check says float32; float32 answers are compared with the float64 reference of the
same inputs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_clean_source, require_nothing_seen

LOG_SOFTMAX, CE = "log_softmax", "cross_entropy"
BUILTINS = ("cross_entropy", "nll_loss", "log_softmax", "logsumexp", "kl_div")
CROSS_ENTROPY = Watch(
    what="cross-entropy",
    functions=(*BUILTINS, "special_log_softmax", "special_logsumexp"),
    ops=("log_softmax", "nll_loss", "cross_entropy", "logsumexp"),
    dispatch_pattern=r"log_softmax|nll_loss|cross_entropy|logsumexp",
    instrument=tuple(f"torch.nn.functional:{name}" for name in BUILTINS if name != "logsumexp"),
    private=r"log_softmax|nll_loss|cross_entropy|logsumexp",
)

exercise = Exercise(
    id="cross_entropy",
    tags=("losses", "numerics"),
    minutes=30,
    title="Cross-entropy loss: stable log-softmax, ignore_index, label smoothing",
    seed="-",
    levels=[
        "shapes & reduction",
        "values",
        "stability",
        "ignore_index",
        "label smoothing",
        "gradients",
        "edge cases",
        "from scratch",
    ],
    defines=(LOG_SOFTMAX, CE),
    # names the source scan flags where the notebook binds them to torch's (its own
    # `def log_softmax` binds nothing from torch)
    forbidden=(
        *BUILTINS,
        "cross_entropy_loss",
        "nll_loss_nd",
        "CrossEntropyLoss",
        "NLLLoss",
        "LogSoftmax",
        "KLDivLoss",
    ),
    watch=CROSS_ENTROPY,
)

F32, F64 = lib.F32, lib.F64
N, C, IGNORE = 8, 5, -100


def logits(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F64) -> torch.Tensor:
    """Seeded logits (normal noise times `scale`)."""
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def targets(
    *shape: int, classes: int = C, seed: int, ignored: tuple[int, ...] = ()
) -> torch.Tensor:
    """Seeded int64 class ids; the flat positions in `ignored` hold IGNORE."""
    t = lib.randint(0, classes, *shape, seed=seed)
    t.view(-1)[list(ignored)] = IGNORE
    return t


def reference(x: torch.Tensor, y: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """torch's loss with the classes on the last axis, computed in float64."""
    out = F.cross_entropy(x.double().reshape(-1, x.shape[-1]), y.reshape(-1).long(), **kwargs)
    return out.reshape(y.shape) if kwargs.get("reduction") == "none" else out


def fresh(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` in the same layout (strides): a non-contiguous input stays so (`clone`
    makes a copy of a strided view contiguous)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


def losses(kernel, calls: list[tuple[torch.Tensor, torch.Tensor, dict]]) -> list:
    """cross_entropy(x, y, **kwargs) for each call, in one round trip (each call gets its
    own copies, in the same layout, so one that writes into its inputs cannot change the
    next)."""
    return kernel.many(kernel.get(CE), [((fresh(x), fresh(y)), kw) for x, y, kw in calls])


def unchanged(kernel, x: torch.Tensor, y: torch.Tensor, kwargs: dict) -> None:
    """cross_entropy(logits, target, **kwargs) leaves both inputs as they were (each held
    in the kernel, read back after the call)."""
    held_x, held_y = kernel.hold(x.clone(), "logits"), kernel.hold(y.clone(), "target")
    kernel.get(CE)(held_x, held_y, **kwargs)
    checks.equal(kernel.attribute(held_x, "data"), x, f"logits after {described(kwargs)}")
    checks.equal(kernel.attribute(held_y, "data"), y, f"target after {described(kwargs)}")


def described(kwargs: dict) -> str:
    """`cross_entropy(logits, target, ...)` with the keyword arguments given."""
    return f"{CE}(logits, target{''.join(f', {k}={v!r}' for k, v in kwargs.items())})"


def match(kernel, x: torch.Tensor, y: torch.Tensor, settings: list[dict], where: str) -> None:
    """The loss for each keyword set in `settings` matches torch's (shape and values)."""
    for got, kwargs in zip(losses(kernel, [(x, y, kw) for kw in settings]), settings, strict=True):
        checks.close(got, reference(x, y, **kwargs), f"{described(kwargs)} {where}".rstrip())


def loss_gradient_matches(kernel, x: torch.Tensor, y: torch.Tensor, what: str, **kwargs) -> None:
    """d(sum(loss * r))/d(logits) matches autograd through torch's loss (r: seeded noise of
    the loss's shape)."""
    lib.gradients_match(kernel, kernel.get(CE), (x, y), reference, [0], what, kwargs=kwargs,
                        names=["logits"])  # fmt: skip


def dtype_is(value: Any, dtype: torch.dtype, what: str) -> None:
    """`value` is a tensor of `dtype`."""
    if checks.tensor(value, what).dtype != dtype:
        raise checks.Failed(f"{what} has dtype {value.dtype}, want {dtype} (the logits' dtype)")


# --- shapes & reduction -------------------------------------------------------------------


@exercise.check("shapes & reduction", hidden=False)
def log_softmax_keeps_shape_and_dtype(kernel):
    """log_softmax returns x's shape and dtype, for 2-D and 3-D x and any dim."""
    calls = [((logits(3, 5, seed=1),), {}), ((logits(2, 3, 4, seed=2),), {"dim": 1})]
    for got, ((x,), kw) in zip(kernel.many(kernel.get(LOG_SOFTMAX), calls), calls, strict=True):
        what = f"{LOG_SOFTMAX}(x of shape {tuple(x.shape)}{', dim=1' if kw else ''})"
        checks.tensor(got, what, x.shape)
        dtype_is(got, F64, what)


@exercise.check("shapes & reduction", hidden=False)
def loss_shapes(kernel):
    """Reductions "mean" and "sum" give 0-dim tensors, "none" the target's shape (N,) or (B, T)."""
    x2, y2 = logits(N, C, seed=3), targets(N, seed=3)
    x3, y3 = logits(2, 3, 7, seed=4), targets(2, 3, classes=7, seed=4)
    calls = [
        (x, y, {"reduction": r}) for x, y in ((x2, y2), (x3, y3)) for r in ("mean", "sum", "none")
    ]
    for got, (x, y, kw) in zip(losses(kernel, calls), calls, strict=True):
        what = f"{described(kw)} for logits {tuple(x.shape)}"
        checks.tensor(got, what, y.shape if kw["reduction"] == "none" else ())
        dtype_is(got, F64, what)


@exercise.check("shapes & reduction")
def reductions_agree(kernel):
    """Reduction "mean" is the mean of the "none" losses and "sum" their sum (none ignored)."""
    for x, y in ((logits(N, C, seed=5), targets(N, seed=5)),
                 (logits(2, 3, 7, seed=6), targets(2, 3, classes=7, seed=6))):  # fmt: skip
        each, mean, total = losses(
            kernel, [(x, y, {"reduction": r}) for r in ("none", "mean", "sum")]
        )
        each = checks.tensor(each, f"{CE}(..., reduction='none')")
        shape = f"for logits {tuple(x.shape)}"
        checks.close(
            checks.tensor(total, "sum"), each.sum(), f"reduction='sum' vs the sum of 'none' {shape}"
        )
        checks.close(
            checks.tensor(mean, "mean"),
            each.mean(),
            f"reduction='mean' vs the mean of 'none' {shape}",
        )


# --- values -------------------------------------------------------------------------------


@exercise.check("values", points=2, hidden=False)
def log_softmax_values(kernel):
    """log_softmax matches torch.log_softmax along the last axis, along dim=0 and dim=1."""
    cases = [(logits(4, 7, seed=7), -1), (logits(5, 3, seed=8), 0), (logits(2, 4, 3, seed=9), 1)]
    calls = [((x,), {"dim": d}) for x, d in cases]
    for got, (x, d) in zip(kernel.many(kernel.get(LOG_SOFTMAX), calls), cases, strict=True):
        want = torch.log_softmax(x, dim=d)
        checks.close(got, want, f"{LOG_SOFTMAX}(x of shape {tuple(x.shape)}, dim={d}) vs torch's")


@exercise.check("values", points=2)
def per_example_losses(kernel):
    """reduction="none": each row's -log p[target] matches F.cross_entropy's."""
    match(
        kernel,
        logits(N, C, seed=10),
        targets(N, seed=10),
        [{"reduction": "none"}],
        "for (N, C) logits",
    )


@exercise.check("values", points=2)
def mean_and_sum(kernel):
    """The default ("mean") and "sum" losses match F.cross_entropy's."""
    match(
        kernel,
        logits(N, C, seed=11),
        targets(N, seed=11),
        [{}, {"reduction": "sum"}],
        "for (N, C) logits",
    )


@exercise.check("values", points=2)
def sequence_logits(kernel):
    """(B, T, C) logits, classes last (also with T == C): torch's loss of the flattened rows."""
    for shape, seed in (((2, 3, 7), 12), ((2, 5, 5), 13)):
        x, y = logits(*shape, seed=seed), targets(*shape[:2], classes=shape[2], seed=seed)
        match(kernel, x, y, [{"reduction": "none"}, {}], f"for (B, T, C) = {shape}")


@exercise.check("values")
def losses_are_non_negative(kernel):
    """Every per-position loss is >= 0 (it is -log of a probability)."""
    answers = losses(
        kernel, [(logits(N, C, seed=14, scale=3.0), targets(N, seed=14), {"reduction": "none"})]
    )
    got = checks.tensor(answers[0], "the per-position losses", (N,))
    if float(got.min()) < 0:
        raise checks.Failed(f"the per-position losses: min {float(got.min()):.4g}, want >= 0")


@exercise.check("values")
def uniform_logits_give_log_c(kernel):
    """Equal logits (all 3.0) give every position the loss log C."""
    x = torch.full((N, C), 3.0, dtype=F64)
    got = losses(kernel, [(x, targets(N, seed=15), {"reduction": "none"})])[0]
    checks.close(got, torch.full((N,), float(torch.log(torch.tensor(C, dtype=F64)))),
                 f"the losses of equal logits (C = {C}) vs log C")  # fmt: skip


# --- stability ----------------------------------------------------------------------------


@exercise.check("stability", points=2, hidden=False)
def log_softmax_of_large_logits(kernel):
    """Logits of magnitude 1e4 (float64 and float32): log_softmax is finite and matches."""
    xs = [logits(4, 6, seed=16, scale=1e4), logits(4, 6, seed=17, scale=1e4, dtype=F32)]
    for got, x in zip(
        kernel.many(kernel.get(LOG_SOFTMAX), [((x,), {}) for x in xs]), xs, strict=True
    ):
        what = f"{LOG_SOFTMAX} of {str(x.dtype)[6:]} logits of magnitude 1e4"
        checks.finite(checks.tensor(got, what, x.shape), what)
        checks.close(got, torch.log_softmax(x.double(), dim=-1), f"{what} vs torch's")


@exercise.check("stability", points=2)
def loss_of_large_logits(kernel):
    """Logits of magnitude 1e4 (float64 and float32): the loss is finite and matches."""
    y = targets(N, seed=18)
    for x in (logits(N, C, seed=18, scale=1e4), logits(N, C, seed=19, scale=1e4, dtype=F32)):
        where = f"for {str(x.dtype)[6:]} logits of magnitude 1e4"
        for got, kw in zip(losses(kernel, [(x, y, {"reduction": "none"}), (x, y, {})]),
                           [{"reduction": "none"}, {}], strict=True):  # fmt: skip
            checks.finite(
                checks.tensor(got, f"{described(kw)} {where}"), f"{described(kw)} {where}"
            )
            checks.close(got, reference(x, y, **kw), f"{described(kw)} {where}")


@exercise.check("stability")
def row_offsets_change_nothing(kernel):
    """Adding a different large constant to each row (0, 1e3, ..., 7e3) changes no loss."""
    x, y = logits(N, C, seed=20), targets(N, seed=20)
    shifted = x + 1e3 * torch.arange(N, dtype=F64)[:, None]
    moved = losses(kernel, [(shifted, y, {"reduction": "none"})])[0]
    checks.close(moved, reference(x, y, reduction="none"),
                  "per-position losses after adding 1e3 * row to each row")  # fmt: skip


@exercise.check("stability")
def common_offset_changes_nothing(kernel):
    """Adding 1e3 to every logit (rows of unit spread) changes neither log_softmax nor the loss."""
    x, y = logits(N, C, seed=42), targets(N, seed=42)
    moved = x + 1e3
    got = kernel.get(LOG_SOFTMAX)(moved)
    checks.close(got, torch.log_softmax(x, dim=-1), f"{LOG_SOFTMAX}(x + 1e3) vs torch's of x")
    got = losses(kernel, [(moved, y, {"reduction": "none"})])[0]
    checks.close(got, reference(x, y, reduction="none"), "per-position losses after adding 1e3")


# --- ignore_index -------------------------------------------------------------------------


@exercise.check("ignore_index", points=2, hidden=False)
def ignored_targets_are_left_out(kernel):
    """Targets equal to -100 (the default ignore_index): "mean" averages the other rows only."""
    x, y = logits(N, C, seed=21), targets(N, seed=21, ignored=(1, 4, 5))
    match(kernel, x, y, [{}, {"reduction": "sum"}], "with 3 of 8 targets = -100")


@exercise.check("ignore_index")
def ignored_positions_have_zero_loss(kernel):
    """reduction="none": ignored positions have loss 0, the others their own loss."""
    match(kernel, logits(N, C, seed=22), targets(N, seed=22, ignored=(0, 6)),
          [{"reduction": "none"}], "with targets 0 and 6 = -100")  # fmt: skip


@exercise.check("ignore_index", points=2)
def custom_ignore_index(kernel):
    """ignore_index=2 (a valid class id): the rows whose target is 2 are left out."""
    x, y = logits(N, C, seed=24), torch.tensor([2, 0, 4, 2, 1, 3, 2, 0])
    kws: list[dict] = [{"ignore_index": 2}, {"ignore_index": 2, "reduction": "none"}]
    match(kernel, x, y, kws, "with 3 of 8 targets = 2")


@exercise.check("ignore_index")
def ignore_index_zero(kernel):
    """ignore_index=0 (falsy, and a valid class id) is honoured: rows whose target is 0 are
    left out, not taken for the default -100."""
    x, y = logits(N, C, seed=43), torch.tensor([0, 3, 0, 1, 4, 0, 2, 1])
    kws: list[dict] = [{"ignore_index": 0}, {"ignore_index": 0, "reduction": "none"}]
    match(kernel, x, y, kws, "with 3 of 8 targets = 0")


@exercise.check("ignore_index")
def every_target_ignored(kernel):
    """Every target ignored: "mean" is NaN (0 / 0, as torch), "sum" is 0, "none" all zeros."""
    x, y = logits(4, C, seed=25), torch.full((4,), IGNORE)
    mean, total, each = losses(kernel, [(x, y, {"reduction": r}) for r in ("mean", "sum", "none")])
    mean = checks.tensor(mean, "reduction='mean' with every target ignored", ())
    if not torch.isnan(mean):
        raise checks.Failed(
            f"reduction='mean' with every target ignored: got {float(mean):.4g}, want NaN (0 / 0)"
        )
    lib.exactly_zero(checks.tensor(total, "sum", ()), "reduction='sum' with every target ignored")
    lib.exactly_zero(
        checks.tensor(each, "none", (4,)), "reduction='none' with every target ignored"
    )


@exercise.check("ignore_index")
def ignored_targets_are_not_modified(kernel):
    """The target is left unchanged by a call with ignored targets (-100): the ignored ids
    are not overwritten in the caller's tensor."""
    x, y = logits(N, C, seed=40, scale=3.0), targets(N, seed=40, ignored=(1, 5))
    held = kernel.hold(y.clone(), "target")
    kernel.get(CE)(x, held)
    checks.equal(kernel.attribute(held, "data"), y, "target (2 of 8 = -100) after the call")


# --- label smoothing ----------------------------------------------------------------------


@exercise.check("label smoothing", points=2, hidden=False)
def smoothed_loss(kernel):
    """label_smoothing=0.1: "mean", "sum" and "none" match F.cross_entropy's."""
    x, y = logits(N, C, seed=27), targets(N, seed=27)
    settings = [{"label_smoothing": 0.1, "reduction": r} for r in ("mean", "sum", "none")]
    match(kernel, x, y, settings, "")


@exercise.check("label smoothing", points=2)
def smoothed_sequence_loss(kernel):
    """label_smoothing=0.3 with (B, T, C) logits: "mean" and "sum" match torch's."""
    x, y = logits(2, 4, 6, seed=28), targets(2, 4, classes=6, seed=28)
    settings = [{"label_smoothing": 0.3, "reduction": r} for r in ("mean", "sum")]
    match(kernel, x, y, settings, "for (2, 4, 6) logits")


@exercise.check("label smoothing")
def smoothing_of_equal_logits(kernel):
    """Equal logits: the smoothed target still sums to 1, so the loss stays log C."""
    x = torch.zeros(N, C, dtype=F64)
    kw = {"label_smoothing": 0.3, "reduction": "none"}
    got = losses(kernel, [(x, targets(N, seed=29), kw)])[0]
    checks.close(got, torch.full((N,), float(torch.log(torch.tensor(C, dtype=F64)))),
                 f"{described(kw)} of equal logits (C = {C}) vs log C")  # fmt: skip


@exercise.check("label smoothing")
def full_smoothing_ignores_the_target(kernel):
    """label_smoothing=1.0: the target is uniform, so the loss does not depend on the labels."""
    x = logits(N, C, seed=30)
    kw = {"label_smoothing": 1.0, "reduction": "none"}
    first, second = losses(kernel, [(x, targets(N, seed=30), kw), (x, targets(N, seed=31), kw)])
    checks.same(second, first, f"{described(kw)} for two different sets of labels")


@exercise.check("label smoothing")
def smoothing_with_one_class(kernel):
    """C = 1 with label_smoothing=0.1: every loss is 0 (the one class gets all the mass)."""
    x, y = logits(4, 1, seed=35), torch.zeros(4, dtype=torch.int64)
    match(kernel, x, y, [{"label_smoothing": 0.1, "reduction": "none"}], "with C = 1")


@exercise.check("label smoothing", points=2)
def smoothing_with_ignored_targets(kernel):
    """Integration: label_smoothing=0.2 with ignored targets: ignored rows add nothing (the
    smoothing term included), so the loss is that of the kept rows alone."""
    x, y = logits(N, C, seed=26), targets(N, seed=26, ignored=(2, 3, 7))
    kept = y != IGNORE
    settings = [{"label_smoothing": 0.2, "reduction": r} for r in ("mean", "sum")]
    calls = [(x, y, kw) for kw in settings] + [(x[kept], y[kept], kw) for kw in settings]
    calls.append((x, y, {"label_smoothing": 0.2, "reduction": "none"}))
    got = losses(kernel, calls)
    for i, kw in enumerate(settings):
        alone = checks.tensor(got[i + 2], f"{described(kw)} of the kept rows alone")
        checks.close(got[i], alone, f"{described(kw)} with 3 targets = -100 vs the kept rows alone")
    each = checks.tensor(got[4], "reduction='none' with label_smoothing=0.2", (N,))
    checks.equal(each, torch.where(kept, each.detach(), torch.zeros((), dtype=each.dtype)),
                 "reduction='none' losses of ignored rows (label_smoothing=0.2)")  # fmt: skip


# --- gradients ----------------------------------------------------------------------------


@exercise.check("gradients", points=2, hidden=False)
def log_softmax_gradient(kernel):
    """d(sum(log_softmax(x) * r))/dx matches autograd through torch.log_softmax."""
    lib.gradients_match(kernel, kernel.get(LOG_SOFTMAX), (logits(4, 6, seed=32),),
                        lambda x: torch.log_softmax(x, dim=-1), [0], LOG_SOFTMAX, names=["x"])  # fmt: skip


@exercise.check("gradients", points=2)
def loss_gradient(kernel):
    """Gradient of the per-position losses (weighted by noise) w.r.t. the logits matches torch's."""
    x, y = logits(N, C, seed=33), targets(N, seed=33)
    loss_gradient_matches(kernel, x, y, described({"reduction": "none"}), reduction="none")


@exercise.check("gradients")
def ignored_rows_get_zero_gradient(kernel):
    """Ignored targets (-100): their rows of the gradient of the mean loss are 0."""
    x, y = logits(2, 3, 7, seed=34), targets(2, 3, classes=7, seed=34, ignored=(1, 4))
    r = torch.ones((), dtype=F64)
    got = kernel.grad(kernel.get(CE), (x, y), {}, wrt=[0], cotangent=r, params=False)
    what = "gradient of cross_entropy(logits, target) w.r.t. logits, 2 targets = -100"
    grad = checks.tensor(got["inputs"][0], what, x.shape)
    ignored = (y == IGNORE)[..., None].expand(x.shape)
    checks.close(grad, torch.zeros_like(x), f"{what}, at the ignored rows", where=ignored)


@exercise.check("gradients", points=2)
def smoothed_loss_gradient(kernel):
    """Gradient of the mean loss with label_smoothing=0.2 w.r.t. the logits matches torch's."""
    x, y = logits(2, 3, 7, seed=44), targets(2, 3, classes=7, seed=44)
    loss_gradient_matches(kernel, x, y, described({"label_smoothing": 0.2}), label_smoothing=0.2)


# --- edge cases ---------------------------------------------------------------------------


@exercise.check("edge cases")
def single_class(kernel):
    """C = 1: log_softmax is 0 and every loss is 0."""
    x, y = logits(4, 1, seed=35), torch.zeros(4, dtype=torch.int64)
    checks.close(
        kernel.get(LOG_SOFTMAX)(x), torch.zeros(4, 1, dtype=F64), f"{LOG_SOFTMAX} with C = 1"
    )
    match(kernel, x, y, [{"reduction": "none"}, {}], "with C = 1")


@exercise.check("edge cases", points=2)
def float32_logits(kernel):
    """float32 logits, C = 1000: float32 results, within float32's default tolerance."""
    x, y = logits(6, 1000, seed=36, scale=3.0, dtype=F32), targets(6, classes=1000, seed=36)
    settings: list[dict] = [{"reduction": "none"}, {}]
    for got, kw in zip(losses(kernel, [(x, y, kw) for kw in settings]), settings, strict=True):
        dtype_is(got, F32, f"{described(kw)} for float32 logits")
        checks.close(got, reference(x, y, **kw), f"{described(kw)} for float32 logits, C = 1000")
    got = kernel.get(LOG_SOFTMAX)(x)
    dtype_is(got, F32, f"{LOG_SOFTMAX} of float32 logits")
    checks.close(got, torch.log_softmax(x.double(), dim=-1), f"{LOG_SOFTMAX} of float32 logits")


@exercise.check("edge cases", points=2)
def non_contiguous_logits(kernel):
    """(B, T, C) logits and (B, T) targets in a non-contiguous layout (no .view(-1, C) or
    .view(-1) possible): the same losses and log_softmax."""
    x = lib.noncontiguous(logits(2, 3, 7, seed=37))
    y = lib.noncontiguous(targets(2, 3, classes=7, seed=37))
    match(kernel, x, y, [{}, {"reduction": "sum"}], "for non-contiguous logits and target")
    got = kernel.get(LOG_SOFTMAX)(x)
    checks.close(got, torch.log_softmax(x, dim=-1), f"{LOG_SOFTMAX}(non-contiguous x)")


@exercise.check("edge cases")
def int32_targets(kernel):
    """int32 targets give the same losses as int64 ones."""
    x, y = logits(N, C, seed=38), targets(N, seed=38)
    match(kernel, x, y.int(), [{"reduction": "none"}, {}], "with int32 targets")


@exercise.check("edge cases")
def batch_of_one(kernel):
    """One row (1, C) and one position (1, 1, C): "none" keeps the batch axes."""
    x2, y2 = logits(1, C, seed=39), targets(1, seed=39)
    x3, y3 = x2[None], y2[None]
    match(kernel, x2, y2, [{"reduction": "none"}, {}], "for one row (1, C)")
    match(kernel, x3, y3, [{"reduction": "none"}], "for one position (1, 1, C)")


@exercise.check("edge cases", points=2)
def inputs_are_not_modified(kernel):
    """Neither log_softmax's x nor cross_entropy's logits and target change during a call."""
    x, y = logits(N, C, seed=46, scale=3.0), targets(N, seed=46)
    held = kernel.hold(x.clone(), "x")
    kernel.get(LOG_SOFTMAX)(held)
    checks.equal(kernel.attribute(held, "data"), x, f"x after {LOG_SOFTMAX}(x)")
    unchanged(kernel, x, y, {})


@exercise.check("edge cases")
def smoothing_leaves_inputs_unchanged(kernel):
    """Neither logits nor target changes during a call with label_smoothing=0.1."""
    x, y = logits(N, C, seed=45, scale=3.0), targets(N, seed=45)
    unchanged(kernel, x, y, {"label_smoothing": 0.1})


# --- from scratch -------------------------------------------------------------------------


def run_both(kernel) -> None:
    """One call of each function with default arguments, so a stub answers first (the watch
    saw every call the other tests made)."""
    kernel.get(LOG_SOFTMAX)(logits(2, 3, seed=41))
    kernel.get(CE)(logits(2, 3, seed=41), torch.tensor([0, 2]))


@exercise.check("from scratch", points=2)
def no_builtin_in_source(kernel):
    """The notebook's code names none of torch's cross-entropy, log-softmax, logsumexp built-ins."""
    run_both(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch", points=2)
def no_builtin_at_run_time(kernel):
    """None of those built-ins ran while the hidden tests called the notebook's functions."""
    run_both(kernel)
    require_nothing_seen(kernel.seen)
