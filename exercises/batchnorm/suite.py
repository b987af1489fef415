"""Hidden suite for `batchnorm`: batch normalisation over axis 1 from scratch, as a pure
function `batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)`
returning (y, new_running_mean, new_running_var), and a module `BatchNorm` with buffers,
pinned to torch's F.batch_norm and nn.BatchNorm1d/2d computed here in float64.

What makes the bugs show (EXERCISES_CANON.md, section 9): random weights, biases and
running statistics (ones and zeros hide which is which); small batches (n = 4 values per
channel for (N, C) inputs, so the unbiased factor n/(n - 1) is 4/3); three batches of
different statistics before the running statistics are read (a wrong start or a wrong
momentum convention shows by then); channels whose values sit near 1e9 (a one-pass
variance loses every digit) only in float64; x ~ 1e-3 for the eps placement. One feature
per check, every other argument at its default. The reference's running tensors are
clones (F.batch_norm updates the running tensors it is given in place).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import (
    require_clean_source,
    require_no_builtin_module,
    require_nothing_seen,
)

FUNCTION, MODULE = "batch_norm", "BatchNorm"
F32, F64 = lib.F32, lib.F64
C = 3  # channels; no other axis of an input is 3 long

# torch's normalisations: batch norm and everything that computes the same output on a
# reshaped input (layer, group, instance norm), as functions, aten ops and modules
NORMS = r"batch_norm|layer_norm|group_norm|instance_norm|rms_norm"
FUNCTIONS = (
    "batch_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "_batch_norm_impl_index",
    "batch_norm_stats",
    "batch_norm_elemt",
    "batch_norm_gather_stats",
    "batch_norm_gather_stats_with_counts",
    "batch_norm_update_stats",
    "cudnn_batch_norm",
    "miopen_batch_norm",
    "instance_norm",
    "group_norm",
    "native_group_norm",
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
)
MODULES = (
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "SyncBatchNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "GroupNorm",
    "LayerNorm",
    "RMSNorm",
)
FROM = "torch.nn.modules"
WATCH = Watch(
    what="normalization",
    functions=FUNCTIONS,
    ops=("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm"),
    dispatch_pattern=NORMS,
    instrument=tuple(
        f"torch.nn.functional:{name}"
        for name in ("batch_norm", "instance_norm", "group_norm", "layer_norm", "rms_norm")
    ),
    modules=frozenset(
        {f"{FROM}.batchnorm._NormBase", f"{FROM}.instancenorm._InstanceNorm"}
        | {f"{FROM}.normalization.{name}" for name in ("LayerNorm", "GroupNorm", "RMSNorm")}
    ),
    private=NORMS,
)

exercise = Exercise(
    id="batchnorm",
    tags=("normalization", "vision", "modules"),
    minutes=50,
    title="BatchNorm (training, evaluation, running statistics), from scratch",
    seed="-",
    levels=[
        "shapes and state",
        "training values",
        "running stats",
        "evaluation",
        "momentum",
        "gradients",
        "edge cases",
        "from scratch",
    ],
    defines=(FUNCTION, MODULE),
    forbidden=(*FUNCTIONS, *MODULES),
    watch=WATCH,  # set by the lead from the independent solution's time
)


# -- inputs and references (the grader's torch, float64) -----------------------------------


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F64) -> torch.Tensor:
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def batch(*shape: int, seed: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Seeded x whose channels have different means and spreads. The spreads (300 to 3000)
    make eps = 1e-5 negligible (below 1e-7 of the output) outside the eps tests."""
    x = randn(*shape, seed=seed, dtype=dtype)
    view = [1, -1] + [1] * (len(shape) - 2)
    spread = torch.tensor([300.0, 1000.0, 3000.0], dtype=dtype).reshape(view)
    offset = torch.tensor([-500.0, 200.0, 1000.0], dtype=dtype).reshape(view)
    return x * spread + offset + 100 * (seed % 5)


def affine(seed: int, dtype: torch.dtype = F64) -> tuple[torch.Tensor, torch.Tensor]:
    """A random weight and bias (C,)."""
    return randn(C, seed=seed, dtype=dtype), randn(C, seed=seed + 1, dtype=dtype)


def running(seed: int, dtype: torch.dtype = F64) -> tuple[torch.Tensor, torch.Tensor]:
    """Random running statistics on batch()'s scale: a mean (C,) and a variance (C,) of
    about 1e6 (eps negligible)."""
    mean = randn(C, seed=seed, scale=300.0, dtype=dtype)
    return mean, randn(C, seed=seed + 1, dtype=dtype).exp() * 1e6


def fresh() -> tuple[torch.Tensor, torch.Tensor]:
    """A module's initial running statistics (zeros, ones), float64."""
    return torch.zeros(C, dtype=F64), torch.ones(C, dtype=F64)


def reference(x, rm, rv, w=None, b=None, training=False, momentum=0.1, eps=1e-5):
    """F.batch_norm in float64 on clones: (y, new running mean, new running var). torch
    refuses eps = 0 in training: 1e-300 stands for it (sqrt(var + 1e-300) == sqrt(var) in
    float64 for the variances used here)."""
    rm, rv = rm.double().clone(), rv.double().clone()
    w = None if w is None else w.double()
    b = None if b is None else b.double()
    y = F.batch_norm(x.double(), rm, rv, w, b, training, momentum, max(eps, 1e-300))
    return y, rm, rv


def described(kwargs: dict[str, Any], given: str = "") -> str:
    """`batch_norm(x, running_mean, running_var[, given], ...)` with the keywords given."""
    extra = f", {given}" if given else ""
    keywords = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return f"{FUNCTION}(x, running_mean, running_var{extra}{keywords})"


def triple(value: Any, x: torch.Tensor, what: str) -> tuple[torch.Tensor, ...]:
    """(y, new_running_mean, new_running_var): y of x's shape and dtype, the others (C,)."""
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        raise checks.Interface(f"{what}: got {checks.describe(value)}, want a tuple "
                               "(y, new_running_mean, new_running_var)")  # fmt: skip
    y = output(value[0], x, f"{what}[0] (y)")
    mean = checks.tensor(value[1], f"{what}[1] (new_running_mean)", (C,))
    var = checks.tensor(value[2], f"{what}[2] (new_running_var)", (C,))
    return y, mean, var


def output(value: Any, x: torch.Tensor, what: str) -> torch.Tensor:
    """`value` is a tensor of x's shape and x's dtype."""
    y = checks.tensor(value, what, x.shape)
    if y.dtype != x.dtype:
        raise checks.Failed(f"{what} has dtype {str(y.dtype)[6:]}, want {str(x.dtype)[6:]} "
                            "(x's dtype)")  # fmt: skip
    return y


def call(kernel, x, rm, rv, w=None, b=None, what: str = "", **kwargs):
    """The candidate's batch_norm and torch's on the same inputs: (got, want), each a
    triple; `what` names the call."""
    args = (x, rm, rv) if w is None and b is None else (x, rm, rv, w, b)
    got = triple(kernel.get(FUNCTION)(*args, **kwargs), x, what)
    return got, reference(x, rm, rv, w, b, **kwargs)


def y_matches(kernel, x, rm, rv, w=None, b=None, note: str = "", **kwargs) -> None:
    """y from batch_norm(...) matches F.batch_norm's."""
    given = "weight, bias" if w is not None else ""
    what = described(kwargs, given) + (f" {note}" if note else "")
    got, want = call(kernel, x, rm, rv, w, b, what, **kwargs)
    checks.close(got[0], want[0], f"y of {what} vs F.batch_norm")


def stats_match(kernel, x, rm, rv, note: str = "", var: bool = True, **kwargs) -> None:
    """The new running statistics from batch_norm(...) match F.batch_norm's update (the
    mean only, with var=False)."""
    what = described(kwargs) + (f" {note}" if note else "")
    got, want = call(kernel, x, rm, rv, what=what, **kwargs)
    checks.close(got[1], want[1], f"new_running_mean of {what} vs F.batch_norm")
    if var:
        checks.close(got[2], want[2], f"new_running_var of {what} vs F.batch_norm")


# -- the module ----------------------------------------------------------------------------


def module(kernel, dtype: torch.dtype = F64, affine_seed: int | None = None, **kwargs):
    """BatchNorm(3, **kwargs) in the kernel, cast to `dtype` (and holding a random weight and
    bias when `affine_seed` is given); with torch's own nn.BatchNorm in float64, set the
    same way, to step in lockstep. The twin starts from the candidate's own initial buffers,
    so a wrong initial value loses points once, where the state is checked."""
    m = kernel.new(MODULE, C, **kwargs)
    if dtype != F32:
        m.to(dtype)
    twin = nn.BatchNorm2d(C, **kwargs).double()
    start = buffers(m, MODULE)
    with torch.no_grad():
        cast(torch.Tensor, twin.running_mean).copy_(start["running_mean"])
        cast(torch.Tensor, twin.running_var).copy_(start["running_var"])
    if affine_seed is not None:
        w, b = affine(affine_seed, dtype)
        lib.load_state(m, MODULE, {"weight": w, "bias": b})
        with torch.no_grad():
            twin.weight.copy_(w), twin.bias.copy_(b)
    return m, twin


def torch_step(twin: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """torch's module on x (a (N, C) or (N, C, L) x through BatchNorm2d's math)."""
    with torch.no_grad():
        shaped = x.double().reshape(*x.shape[:2], -1, 1) if x.dim() != 4 else x.double()
        return twin(shaped).reshape(x.shape)


def buffers(m, owner: str) -> dict[str, torch.Tensor]:
    """The module's running_mean, running_var and num_batches_tracked (state_dict)."""
    names = ["running_mean", "running_var", "num_batches_tracked"]
    state = lib.require_state(lib.state_dict(m, owner), names, owner,
                              {"running_mean": (C,), "running_var": (C,)})  # fmt: skip
    checks.tensor(state["num_batches_tracked"], f"{owner}.num_batches_tracked", (),
                  floating=False)  # fmt: skip
    return state


def buffers_match(m, twin: nn.Module, owner: str, names=("mean", "var", "count")) -> None:
    """The module's buffers named (running_mean, running_var, num_batches_tracked) equal
    torch's module's (values; the counter exactly)."""
    state = buffers(m, owner)
    for name in ("mean", "var"):
        if name in names:
            got, want = state[f"running_{name}"], getattr(twin, f"running_{name}")
            checks.close(got, want, f"{owner}.running_{name} vs torch's")
    count = int(state["num_batches_tracked"])
    want_count = int(cast(torch.Tensor, twin.num_batches_tracked))
    if "count" in names and count != want_count:
        raise checks.Failed(f"{owner}.num_batches_tracked is {count}, want {want_count}")


def three_batches(seed: int) -> list[torch.Tensor]:
    """Three (4, 3, 3, 2) batches of different statistics."""
    return [batch(4, C, 3, 2, seed=seed + i) * (1 + i) for i in range(3)]


# -- shapes and state ------------------------------------------------------------------------


@exercise.check("shapes and state", hidden=False)
def function_returns_a_triple(kernel):
    """batch_norm(x (4, 3), running_mean, running_var, training=True) returns (y (4, 3),
    new_running_mean (3,), new_running_var (3,)), y in x's dtype (float64)."""
    x = batch(4, C, seed=1)
    triple(kernel.get(FUNCTION)(x, *fresh(), training=True), x, described({"training": True}))


@exercise.check("shapes and state", hidden=False)
def module_state_when_constructed(kernel):
    """BatchNorm(3).state_dict() holds exactly weight (ones), bias (zeros), running_mean
    (zeros), running_var (ones), all float32 (3,), and num_batches_tracked, int64 0 (0-dim)."""
    m = kernel.new(MODULE, C)
    want = {"weight": torch.ones(C), "bias": torch.zeros(C), "running_mean": torch.zeros(C),
            "running_var": torch.ones(C), "num_batches_tracked": torch.tensor(0)}  # fmt: skip
    state_is(m, "BatchNorm(3)", want)


@exercise.check("shapes and state")
def module_without_affine(kernel):
    """BatchNorm(3, affine=False).state_dict() holds exactly the three buffers: no weight,
    no bias."""
    m = kernel.new(MODULE, C, affine=False)
    want = {"running_mean": torch.zeros(C), "running_var": torch.ones(C),
            "num_batches_tracked": torch.tensor(0)}  # fmt: skip
    state_is(m, "BatchNorm(3, affine=False)", want)


def state_is(m, owner: str, want: dict[str, torch.Tensor]) -> None:
    """The module's state_dict holds exactly `want`'s names, with those values and dtypes."""
    state = lib.state_dict(m, owner)
    if set(map(str, state)) != set(want):
        raise checks.Failed(
            f"{owner}.state_dict() holds {', '.join(sorted(map(str, state))) or 'nothing'}, "
            f"want exactly {', '.join(sorted(want))}"
        )
    for name, value in want.items():
        checks.equal(state[name], value, f"{owner}.{name} when constructed")


@exercise.check("shapes and state")
def module_keeps_the_shape(kernel):
    """BatchNorm(3) (training) maps x (N, C), (N, C, L) and (N, C, H, W) to x's shape and
    dtype."""
    m, _ = module(kernel)
    for shape in ((4, C), (2, C, 5), (2, C, 4, 5)):
        x = batch(*shape, seed=2)
        output(m(x), x, f"BatchNorm(3)(x of shape {list(shape)})")


# -- training values -------------------------------------------------------------------------


@exercise.check("training values", points=2, hidden=False)
def training_4d_matches_torch(kernel):
    """training=True on x (4, 3, 5, 2) with a random weight and bias: statistics over N, H
    and W; y matches F.batch_norm."""
    y_matches(kernel, batch(4, C, 5, 2, seed=10), *fresh(), *affine(11), training=True)


@exercise.check("training values", points=2)
def training_2d_matches_torch(kernel):
    """training=True on x (4, 3) with a random weight and bias: y matches F.batch_norm."""
    y_matches(kernel, batch(4, C, seed=12), *fresh(), *affine(13), training=True)


@exercise.check("training values")
def training_without_affine(kernel):
    """training=True without weight and bias (None: no scale, no shift)."""
    y_matches(kernel, batch(4, C, 2, 5, seed=14), *fresh(), training=True)


@exercise.check("training values")
def eps_inside_the_root(kernel):
    """x ~ 1e-3 (variance ~ 1e-6, below eps = 1e-5): eps inside the square root."""
    x = randn(4, C, 5, 2, seed=16, scale=1e-3)
    y_matches(kernel, x, *fresh(), training=True, note="(x ~ 1e-3)")


@exercise.check("training values")
def zero_eps_is_honoured(kernel):
    """eps=0.0 (falsy) is the eps used, not taken for the default."""
    x = randn(4, C, 5, 2, seed=18, scale=1e-2)
    y_matches(kernel, x, *fresh(), training=True, eps=0.0, note="(x ~ 1e-2)")


@exercise.check("training values")
def module_training_matches_torch(kernel):
    """BatchNorm(3) holding a random weight and bias, in training mode, matches
    nn.BatchNorm2d's output on x (4, 3, 5, 2)."""
    m, twin = module(kernel, affine_seed=19)
    x = batch(4, C, 5, 2, seed=20)
    got = output(m(x), x, "BatchNorm(3)(x)")
    checks.close(got, torch_step(twin, x), "BatchNorm(3)(x) (training) vs nn.BatchNorm2d")


# -- running stats ---------------------------------------------------------------------------


@exercise.check("running stats", points=2, hidden=False)
def running_stats_after_one_batch(kernel):
    """training=True from (zeros, ones) on x (4, 3, 5, 2): new_running_mean = 0.1 * mean,
    new_running_var = 0.9 + 0.1 * the unbiased variance, as F.batch_norm."""
    stats_match(kernel, batch(4, C, 5, 2, seed=30), *fresh(), training=True)


@exercise.check("running stats")
def unbiased_variance_of_a_small_batch(kernel):
    """x (4, 3): 4 values per channel, so the unbiased variance is 4/3 of the biased one."""
    stats_match(kernel, batch(4, C, seed=32), *fresh(), training=True)


@exercise.check("running stats")
def running_stats_start_from_the_given_ones(kernel):
    """Random given running statistics: new = 0.9 * given + 0.1 * the batch's."""
    stats_match(kernel, batch(4, C, 5, 2, seed=34), *running(35), training=True,
                note="(random running statistics)")  # fmt: skip


@exercise.check("running stats")
def momentum_weights_the_new_batch(kernel):
    """momentum=0.3: new = 0.7 * running + 0.3 * batch (torch's convention)."""
    stats_match(kernel, batch(4, C, 5, 2, seed=36), *running(37), training=True, momentum=0.3)


@exercise.check("running stats", points=2)
def module_after_three_batches(kernel):
    """BatchNorm(3) after three training batches of different statistics: running_mean,
    running_var and num_batches_tracked (3) match nn.BatchNorm2d's."""
    m, twin = module(kernel)
    for x in three_batches(38):
        m(x), torch_step(twin, x)
    buffers_match(m, twin, "BatchNorm(3) after three batches")


# -- evaluation ------------------------------------------------------------------------------


@exercise.check("evaluation", points=2)
def evaluation_uses_the_running_stats(kernel):
    """training=False with random running statistics: y matches F.batch_norm's, and the
    running statistics come back unchanged."""
    x, (rm, rv) = batch(4, C, 5, 2, seed=40), running(41)
    what = described({"training": False})
    got, want = call(kernel, x, rm, rv, what=what, training=False)
    checks.close(got[0], want[0], f"y of {what} vs F.batch_norm")
    checks.equal(got[1], rm, f"new_running_mean of {what}")
    checks.equal(got[2], rv, f"new_running_var of {what}")


def own_state(m, owner: str) -> dict[str, torch.Tensor]:
    """The module's running statistics as it holds them now (float64)."""
    names = ["running_mean", "running_var", "num_batches_tracked"]
    state = lib.require_state(lib.state_dict(m, owner), names, owner,
                              {"running_mean": (C,), "running_var": (C,)})  # fmt: skip
    return {name: t.double() for name, t in state.items()}


@exercise.check("evaluation", points=2)
def module_evaluation_after_training(kernel):
    """BatchNorm(3): three training batches, then eval(): the output is (x - running_mean) /
    sqrt(running_var + eps) * weight + bias with the statistics and parameters the module
    now holds."""
    m, _ = module(kernel)
    for x in three_batches(45):
        m(x)
    m.eval()
    owner = "BatchNorm(3) after three batches"
    state = own_state(m, owner)
    params = lib.require_state(lib.state_dict(m, owner), ["weight", "bias"], owner,
                               {"weight": (C,), "bias": (C,)})  # fmt: skip
    x = batch(4, C, 5, 2, seed=48)
    got = output(m(x), x, "BatchNorm(3)(x) in eval mode")
    view = (1, C, 1, 1)
    mean, var = state["running_mean"].reshape(view), state["running_var"].reshape(view)
    want = (x - mean) / torch.sqrt(var + 1e-5) * params["weight"].double().reshape(view)
    want = want + params["bias"].double().reshape(view)
    checks.close(got, want, "BatchNorm(3)(x) after eval() vs its running statistics")


@exercise.check("evaluation")
def module_evaluation_changes_nothing(kernel):
    """Two training batches, then two calls in eval mode: the buffers and the counter stay
    as they were after training."""
    m, _ = module(kernel)
    for x in three_batches(50)[:2]:
        m(x)
    before = own_state(m, "BatchNorm(3) after two training batches")
    m.eval()
    for x in three_batches(53)[:2]:
        m(x)
    after = own_state(m, "BatchNorm(3) after two eval calls")
    for name, value in before.items():
        checks.equal(after[name], value, f"BatchNorm(3).{name} after two eval calls")


# -- momentum --------------------------------------------------------------------------------


@exercise.check("momentum", points=2)
def momentum_none_is_a_cumulative_average(kernel):
    """BatchNorm(3, momentum=None) after three batches: running_mean is the plain average
    of the three batches' means (factor 1 / num_batches_tracked), as torch's."""
    m, twin = module(kernel, momentum=None)
    for x in three_batches(60):
        m(x), torch_step(twin, x)
    buffers_match(m, twin, "BatchNorm(3, momentum=None) after three batches", ("mean",))


@exercise.check("momentum")
def zero_momentum_freezes_the_stats(kernel):
    """momentum=0.0 (falsy, not the default): batch_norm returns the given running
    statistics, and BatchNorm(3, momentum=0.0) keeps its initial ones over two batches."""
    x, (rm, rv) = batch(4, C, 5, 2, seed=64), running(65)
    stats_match(kernel, x, rm, rv, training=True, momentum=0.0)
    m, twin = module(kernel, momentum=0.0)
    for x in three_batches(66)[:2]:
        m(x), torch_step(twin, x)
    buffers_match(m, twin, "BatchNorm(3, momentum=0.0) after two batches", ("mean", "var"))


@exercise.check("momentum")
def momentum_one_keeps_the_last_batch(kernel):
    """momentum=1.0: the new running mean is the batch's mean."""
    stats_match(kernel, batch(4, C, 5, 2, seed=68), *running(69), training=True, momentum=1.0,
                var=False)  # fmt: skip


@exercise.check("momentum")
def module_uses_its_momentum(kernel):
    """BatchNorm(3, momentum=0.3) after three batches: running_mean matches
    nn.BatchNorm2d(momentum=0.3)'s."""
    m, twin = module(kernel, momentum=0.3)
    for x in three_batches(70):
        m(x), torch_step(twin, x)
    buffers_match(m, twin, "BatchNorm(3, momentum=0.3) after three batches", ("mean",))


# -- gradients -------------------------------------------------------------------------------


def function_gradient(kernel, wrt: list[int], names: list[str], training: bool, seed: int):
    x, (rm, rv), (w, b) = batch(4, C, 3, 2, seed=seed), running(seed + 1), affine(seed + 3)
    lib.gradients_match(
        kernel, kernel.get(FUNCTION), (x, rm, rv, w, b),
        lambda x, rm, rv, w, b, training: F.batch_norm(x, rm.clone(), rv.clone(), w, b, training),
        wrt=wrt, what=described({"training": training}, "weight, bias"), names=names,
        kwargs={"training": training}, output_path=[0],
    )  # fmt: skip


@exercise.check("gradients", points=2)
def training_gradient_wrt_x(kernel):
    """training=True: the gradient of y w.r.t. x (through the batch mean and variance)
    matches F.batch_norm's (float64)."""
    function_gradient(kernel, [0], ["x"], True, seed=80)


@exercise.check("gradients")
def training_gradient_sums_to_zero(kernel):
    """training=True: the gradient of y w.r.t. x sums to 0 over each channel (y does not
    move when a constant is added to a channel: the mean's dependence on x)."""
    x, r = batch(4, C, 3, 2, seed=82), randn(4, C, 3, 2, seed=83)
    got = kernel.grad(kernel.get(FUNCTION), (x, *fresh()), {"training": True}, wrt=[0],
                      cotangent=r, output_path=[0], params=False)  # fmt: skip
    what = f"gradient of y of {described({'training': True})} w.r.t. x"
    g = checks.tensor(got["inputs"][0], what, x.shape)
    sums = g.sum(dim=(0, 2, 3)).abs()
    scale = float(g.abs().sum(dim=(0, 2, 3)).max())
    if float(sums.max()) > 1e-9 * scale:
        raise checks.Failed(f"{what}: sums over channels {sums.tolist()}, want 0 (relative to "
                            f"{scale:.3g}; is the batch mean's dependence on x missing?)")  # fmt: skip


@exercise.check("gradients")
def gradients_wrt_weight_and_bias(kernel):
    """training=True: the gradients of y w.r.t. weight and bias match F.batch_norm's."""
    function_gradient(kernel, [3, 4], ["weight", "bias"], True, seed=85)


@exercise.check("gradients")
def evaluation_gradient_wrt_x(kernel):
    """training=False: the gradient of y w.r.t. x (the running statistics are constants)
    matches F.batch_norm's."""
    function_gradient(kernel, [0], ["x"], False, seed=90)


@exercise.check("gradients")
def evaluation_backward_after_a_training_step(kernel):
    """BatchNorm(3) with a random weight and bias: a training forward and backward, then
    eval() and another forward and backward, which works (the buffers hold no autograd
    history) and gives the gradients of (x - running_mean) / sqrt(running_var + eps) *
    weight + bias for the statistics the module holds, w.r.t. x, weight and bias."""
    m, _ = module(kernel, affine_seed=94)
    x1, x2 = batch(4, C, 3, 2, seed=95), batch(4, C, 3, 2, seed=96)
    r1, r2 = randn(*x1.shape, seed=97), randn(*x2.shape, seed=98)
    kernel.grad(m, (x1,), {}, wrt=[0], cotangent=r1)
    m.eval()
    got = kernel.grad(m, (x2,), {}, wrt=[0], cotangent=r2)
    state = own_state(m, "BatchNorm(3) after a training step")
    view, dims = (1, C, 1, 1), (0, 2, 3)
    w = affine(94)[0].reshape(view)
    root = torch.sqrt(state["running_var"].reshape(view) + 1e-5)
    xhat = (x2 - state["running_mean"].reshape(view)) / root
    owner = "BatchNorm(3) (eval, after a training step)"
    gx = checks.tensor(got["inputs"][0], f"gradient of {owner}(x) w.r.t. x", x2.shape)
    checks.close(gx, r2 * w / root, f"gradient of {owner}(x) w.r.t. x vs weight / sqrt("
                 "running_var + eps)")  # fmt: skip
    for name, want in (("weight", (r2 * xhat).sum(dims)), ("bias", r2.sum(dims))):
        g = got["params"].get(name)
        if g is None:
            raise checks.Failed(f"no gradient reached {owner}.{name}, want one")
        checks.close(checks.tensor(g, f"gradient of {owner}.{name}", (C,)), want,
                     f"gradient of {owner}.{name} vs its closed form")  # fmt: skip


# -- edge cases ------------------------------------------------------------------------------


@exercise.check("edge cases")
def one_value_per_channel_raises(kernel):
    """training=True on x (1, 3) and on x (1, 3, 1, 1) (one value per channel) raises
    ValueError."""
    f = kernel.get(FUNCTION)
    for shape in ((1, C), (1, C, 1, 1)):
        x = batch(*shape, seed=100)
        lib.raises(lambda x=x: f(x, *fresh(), training=True), (), "ValueError",
                   f"{described({'training': True})} on x of shape {list(shape)}")  # fmt: skip


@exercise.check("edge cases")
def small_batches_train(kernel):
    """training=True on x (2, 3) and on x (1, 3, 4, 4) (N = 1, 16 values per channel):
    y matches F.batch_norm."""
    for x in (batch(2, C, seed=102), batch(1, C, 4, 4, seed=103)):
        y_matches(kernel, x, *fresh(), training=True, note=f"(x of shape {list(x.shape)})")


@exercise.check("edge cases")
def evaluation_on_one_sample(kernel):
    """training=False on x (1, 3) (no batch statistics needed) matches F.batch_norm."""
    y_matches(kernel, batch(1, C, seed=104), *running(105), training=False, note="(N = 1)")


@exercise.check("edge cases")
def large_offsets_in_float64(kernel):
    """float64 channels near 1e9 with spreads of 300 to 3000: y matches (the variance from
    centred values; E[x^2] - E[x]^2 cancels)."""
    x = batch(4, C, 5, 2, seed=106) + 1e9
    y_matches(kernel, x, *fresh(), training=True, note="(x near 1e9)")


def unchanged(kernel, kwargs: dict[str, Any], seed: int) -> None:
    """batch_norm(x, running_mean, running_var, weight, bias, **kwargs) with every tensor
    held in the kernel leaves each as it was."""
    x, (rm, rv), (w, b) = batch(4, C, 3, 2, seed=seed), running(seed + 1), affine(seed + 3)
    named = {"x": x, "running_mean": rm, "running_var": rv, "weight": w, "bias": b}
    held = [kernel.hold(t.clone(), name) for name, t in named.items()]
    kernel.get(FUNCTION)(*held, **kwargs)
    for (name, t), h in zip(named.items(), held, strict=True):
        checks.equal(kernel.attribute(h, "data"), t,
                     f"{name} after {described(kwargs, 'weight, bias')}")  # fmt: skip


@exercise.check("edge cases")
def inputs_unchanged_in_training(kernel):
    """training=True leaves x, running_mean, running_var, weight and bias unchanged."""
    unchanged(kernel, {"training": True}, seed=110)


@exercise.check("edge cases")
def inputs_unchanged_in_evaluation(kernel):
    """training=False leaves x, running_mean, running_var, weight and bias unchanged."""
    unchanged(kernel, {"training": False}, seed=115)


@exercise.check("edge cases")
def non_contiguous_input(kernel):
    """A non-contiguous x (4, 3, 5, 2) (column-major, strided last axis: no .view that
    merges axes works) gives F.batch_norm's y in training."""
    x = lib.noncontiguous(batch(4, C, 5, 2, seed=120))
    y_matches(kernel, x, *fresh(), training=True, note="(non-contiguous x)")


@exercise.check("edge cases")
def channels_last_input(kernel):
    """x (4, 3, 5, 2) in channels-last memory format gives F.batch_norm's y in training."""
    x = batch(4, C, 5, 2, seed=122).to(memory_format=torch.channels_last)
    y_matches(kernel, x, *fresh(), training=True, note="(channels-last x)")


@exercise.check("edge cases")
def float32_input(kernel):
    """float32 x and running statistics: a float32 y matching the float64 answer at
    float32's default tolerance."""
    x = batch(4, C, 5, 2, seed=124, dtype=F32)
    y_matches(kernel, x, torch.zeros(C), torch.ones(C), training=True, note="(float32)")


# -- from scratch --------------------------------------------------------------------------


def simplest_calls(kernel):
    """batch_norm and BatchNorm with the default options, so a stub answers first (the watch
    has seen every call the other checks made); returns the module."""
    x = batch(4, C, seed=130)
    kernel.get(FUNCTION)(x, *fresh())
    m = kernel.new(MODULE, C)
    m(x.float())
    return m


@exercise.check("from scratch")
def no_builtin_norm_in_source(kernel):
    """The code names none of torch's normalisation built-ins (its own batch_norm is fine)."""
    simplest_calls(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch")
def no_builtin_norm_at_run_time(kernel):
    """No normalisation built-in ran during the hidden tests, and BatchNorm holds no torch
    norm module."""
    m = simplest_calls(kernel)
    require_no_builtin_module(kernel.modules(m), MODULE, exercise.watch)
    require_nothing_seen(kernel.seen)
