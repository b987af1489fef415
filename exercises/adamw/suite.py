"""Hidden suite of adamw: an `AdamW(torch.optim.Optimizer)` written from scratch, stepped in
lockstep with torch.optim.AdamW's update (or the closed forms of it) run here, in the
grader's process. How a run reaches the optimizer in the kernel: see `drive`.

Inputs are chosen so that each bug shows where it belongs: levels 2-3 use weight_decay 0
(the Adam core alone) and the first step uses gradients of +-1 (|g| = g²); the decay level
uses lr * weight_decay = 0.05 and a parameter with gradients of zeros; gradients are kept
away from zero (|g| >= 0.3) except where eps is the point (about 1e-9). A test about one
thing leaves the others off: one parameter where the step count is not the point,
weight_decay 0 in the first-step, bias-correction and edge-case tests, and the eps tests
start from parameters of 0 with lr 1e-3 (so not even a weight_decay taken for another
shows there).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from grader.exercises.adamw.drive import CLASS, DEFAULTS, Run, Trajectory, same_run
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.handle import attribute_step, call_step
from grader.suite.integrity import require_clean_source, require_nothing_seen

F32, F64 = torch.float32, torch.float64
OPTIMIZERS = ("AdamW", "Adam", "NAdam", "RAdam", "Adamax", "SparseAdam")
FUNCTIONAL = ("adam", "adamw", "nadam", "radam", "adamax", "sparse_adam")
FUSED = ("_fused_adam_", "_fused_adamw_")
# the Python functions every torch Adam-family optimizer runs its update in (a subclass
# calling super().step() and the functional forms end up here too)
KERNELS = (
    "torch.optim.adam:_single_tensor_adam",
    "torch.optim.adam:_multi_tensor_adam",
    "torch.optim.adam:_fused_adam",
    "torch.optim.nadam:_single_tensor_nadam",
    "torch.optim.nadam:_multi_tensor_nadam",
    "torch.optim.radam:_single_tensor_radam",
    "torch.optim.radam:_multi_tensor_radam",
    "torch.optim.adamax:_single_tensor_adamax",
    "torch.optim.adamax:_multi_tensor_adamax",
    "torch.optim._functional:sparse_adam",
)

# Kernel setup: torch.optim.Optimizer's add_param_group, state_dict, load_state_dict and
# zero_grad are wrapped by torch._disable_dynamo, which imports torch._dynamo at their first
# call (seconds per grading, for every notebook, as the shim notes for TorchDispatchMode).
# Filling the wrapper's cache with the function itself skips that import; nothing changes
# in eager mode, where the kernel runs.
SETUP = """import torch
for name in ("add_param_group", "state_dict", "load_state_dict", "zero_grad"):
    function = getattr(torch.optim.Optimizer, name).__wrapped__
    setattr(function, "__dynamo_disable", function)
del name, function
"""

exercise = Exercise(
    id="adamw",
    tags=("optimization",),
    minutes=40,
    title="AdamW optimizer (decoupled weight decay), from scratch",
    seed="-",
    levels=[
        "api",
        "first step",
        "bias correction",
        "decoupled decay",
        "lockstep",
        "eps placement",
        "edge cases",
        "from scratch",
    ],
    defines=(CLASS,),
    forbidden=(*OPTIMIZERS, *FUNCTIONAL, *FUSED),
    watch=Watch(
        what="Adam",
        functions=FUSED,
        ops=("_fused_adam",),  # aten::_fused_adam_ and aten::_fused_adamw_
        instrument=KERNELS,
        private=r"adam",
        setup=SETUP,
    ),
)

KEYS = ("lr", "betas", "eps", "weight_decay")


# ---------------------------------------------------------------------------------------
# Inputs and the closed forms


def noise(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F64) -> torch.Tensor:
    """Seeded N(0, 1) values times `scale`."""
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def signs(*shape: int, seed: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Seeded +-1 values: gradients whose |g| = g² = 1."""
    return torch.where(noise(*shape, seed=seed) > 0, 1.0, -1.0).to(dtype)


def away_from_zero(*shape: int, seed: int, low: float = 0.3, scale: float = 1.0,
                   dtype: torch.dtype = F64) -> torch.Tensor:  # fmt: skip
    """Seeded gradients with |g| >= low * scale (so eps never matters)."""
    g = noise(*shape, seed=seed)
    g = torch.where(g.abs() < low, g.sign() * low + g, g)
    return (g * scale).to(dtype)


def closed_form(theta: torch.Tensor, grads: list[torch.Tensor], lr: float, betas=(0.9, 0.999),
                eps: float = 1e-8, weight_decay: float = 0.0) -> list[tuple]:  # fmt: skip
    """The update written out (float64): (theta, m, v) after each step."""
    beta1, beta2 = betas
    m, v, out = torch.zeros_like(theta), torch.zeros_like(theta), []
    for t, g in enumerate(grads, start=1):
        theta = theta * (1 - lr * weight_decay)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, root_v_hat = m / (1 - beta1**t), v.sqrt() / (1 - beta2**t) ** 0.5
        theta = theta - lr * m_hat / (root_v_hat + eps)
        out.append((theta, m, v))
    return out


def step_count(value: Any, what: str) -> float:
    """state["step"]: an int, a float or a 0-dim tensor."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise checks.Interface(f"{what}: got {checks.describe(value)}, want a number of steps")


def moment(state: dict[str, dict[str, Any]], name: str, key: str) -> torch.Tensor:
    """state[name][key] as a tensor, or an Interface failure naming what is missing."""
    if name not in state:
        raise checks.Failed(f"{CLASS}.state has nothing for {name}, which had gradients")
    entry = state[name]
    if key not in entry:
        keys = ", ".join(map(repr, entry)) or "none"
        raise checks.Interface(f"state[{name}] has no {key!r} (keys: {keys})")
    return checks.tensor(entry[key], f"state[{name}][{key!r}]")


# ---------------------------------------------------------------------------------------
# api


def three_params(seed: int = 0) -> Run:
    """p steps 3 times, q misses a gradient at step 2, r never has one (default options)."""
    params = {"p": noise(2, 3, seed=seed, dtype=F32), "q": noise(3, seed=seed + 1, dtype=F32),
              "r": noise(2, seed=seed + 2, dtype=F32)}  # fmt: skip
    grads = [
        {
            "p": noise(2, 3, seed=seed + 10 + t, dtype=F32),
            "q": noise(3, seed=seed + 20 + t, dtype=F32),
        }
        for t in range(3)
    ]
    del grads[1]["q"]
    return Run(params, grads)


@exercise.check("api", hidden=False)
def step_updates_parameters_in_place(kernel):
    """One step (default options) changes each parameter tensor itself, which stays a leaf
    that requires grad; step() returns None; p.grad is left as it was."""
    w0, b0 = noise(3, 4, seed=1, dtype=F32), noise(4, seed=2, dtype=F32)
    gw, gb = noise(3, 4, seed=3, dtype=F32), noise(4, seed=4, dtype=F32)
    run = Run({"w": w0, "b": b0}, [{"w": gw, "b": gb}])
    got = run.on(kernel, reads=("requires_grad", "is_leaf", "grad_fn", "grad"))
    if got.returned[0] is not None:
        raise checks.Interface(f"step() returned {checks.describe(got.returned[0])}, want None")
    for name, before in (("w", w0), ("b", b0)):
        after = checks.tensor(got.after[1][name], f"{name} after one step", before.shape)
        if torch.equal(after, before):
            raise checks.Failed(f"{name} did not change after step(): update the tensor in place")
    requires_grad, is_leaf, grad_fn, grad = got.extra
    if requires_grad is not True or is_leaf is not True or grad_fn is not None:
        raise checks.Failed(
            f"after step(), w has requires_grad={requires_grad}, is_leaf={is_leaf}, grad_fn "
            f"{'None' if grad_fn is None else 'set'}: want a leaf that requires grad"
        )
    if grad is None:
        raise checks.Failed("step() set w.grad to None: leave the gradient as it was")
    checks.equal(grad, gw, "w.grad after step()")


@exercise.check("api")
def step_with_a_closure(kernel):
    """step(closure) calls the closure first, with gradients enabled, and returns what it
    returned: torch.is_grad_enabled gives True, and p.sum gives the sum of p before the
    update."""
    p0, g = noise(3, 4, seed=5), noise(3, 4, seed=6)
    p = kernel.hold(p0.clone(), "p")
    kernel.set_attribute(p, "requires_grad", True)
    opt = kernel.new(CLASS, [p], seed=None, lr=0.1)
    kernel.set_attribute(p, "grad", g)
    enabled = kernel.attribute(kernel.get("torch"), "is_grad_enabled")
    total = kernel.attribute(p, "sum")
    said = kernel.batch([call_step(opt, "step", enabled), attribute_step(p, "data"),
                         call_step(opt, "step", total)])  # fmt: skip
    if said[0] is not True:
        raise checks.Failed(f"step(closure=torch.is_grad_enabled) returned "
                            f"{checks.describe(said[0])}, want True: call the closure with "
                            "gradients enabled and return what it returns")  # fmt: skip
    before = checks.tensor(said[1], "p after the first step", p0.shape)
    checks.close(checks.tensor(said[2], "step(closure=p.sum)", ()), before.sum(),
                 "step(closure=p.sum) vs the sum of p before that step")  # fmt: skip


@exercise.check("api")
def hyperparameters_live_in_param_groups(kernel):
    """param_groups hold lr, betas, eps and weight_decay: the defaults, and per group."""
    w, b = kernel.hold(noise(3, seed=1, dtype=F32), "w"), kernel.hold(noise(2, seed=2), "b")
    plain = kernel.attribute(kernel.new(CLASS, [w], seed=None), "param_groups")
    groups = [{"params": [w], "lr": 0.1}, {"params": [b], "weight_decay": 0.5}]
    options = {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}
    grouped = kernel.attribute(kernel.new(CLASS, groups, seed=None, **options), "param_groups")
    for got, want, what in (
        (plain, [DEFAULTS], f"{CLASS}([w]).param_groups"),
        (grouped, [{**DEFAULTS, **options, "lr": 0.1}, {**DEFAULTS, **options, "weight_decay": 0.5}],
         f"{CLASS}(two groups, lr=0.01, betas=(0.8, 0.99), eps=1e-6).param_groups"),
    ):  # fmt: skip
        if not isinstance(got, list) or not all(isinstance(g, dict) for g in got):
            raise checks.Interface(f"{what}: got {checks.describe(got)}, want a list of dicts")
        checks.data([{k: g.get(k, "missing") for k in KEYS} for g in got], want, what)


@exercise.check("api")
def state_is_per_parameter(kernel):
    """After 3 steps where q misses step 2 and r never has a gradient: state['step'] is 3
    for p and 2 for q, r has no state, exp_avg and exp_avg_sq have the parameter's shape
    and dtype."""
    got = three_params().on(kernel, state=True)
    for name, steps in (("p", 3), ("q", 2)):
        entry = got.state.get(name)
        if entry is None or "step" not in entry:
            raise checks.Failed(f"state[{name}] has no 'step' after {steps} updates")
        count = step_count(entry["step"], f"state[{name}]['step']")
        if count != steps:
            raise checks.Failed(f"state[{name}]['step'] is {count:g} after {steps} updates of "
                                f"{name}, want {steps}: one count per parameter")  # fmt: skip
        for key in ("exp_avg", "exp_avg_sq"):
            value = moment(got.state, name, key)
            shape = tuple(three_params().params[name].shape)
            checks.tensor(value, f"state[{name}][{key!r}]", shape)
            if value.dtype != F32:
                raise checks.Failed(f"state[{name}][{key!r}] is {value.dtype}, want float32 "
                                    "(the parameter's dtype)")  # fmt: skip
    if "r" in got.state and step_count(got.state["r"].get("step", 0), "state[r]['step']"):
        raise checks.Failed("r never had a gradient but has state: skip it entirely")


@exercise.check("api")
def parameters_without_grad_are_skipped(kernel):
    """A parameter whose grad is None does not move at all (no decay either): r never has
    a gradient, q has none at step 2."""
    run = three_params()
    got = run.on(kernel)
    for t in (1, 2, 3):
        checks.equal(got.after[t]["r"], run.params["r"], f"r (grad None) after step {t}")
    checks.equal(got.after[2]["q"], got.after[1]["q"], "q after step 2, where its grad is None")


# ---------------------------------------------------------------------------------------
# first step: weight_decay 0, gradients +-1 (so |g| = g²), float64


def first_step(betas=None, seed: int = 0) -> Run:
    options: dict[str, Any] = {"lr": 0.01, "weight_decay": 0.0}
    if betas:
        options["betas"] = betas
    params = {"w": noise(4, 5, seed=seed + 1)}
    grads = [{"w": signs(4, 5, seed=seed + 3)}]
    return Run(params, grads, options)


@exercise.check("first step", points=2, hidden=False)
def first_step_closed_form(kernel):
    """weight_decay 0, lr 0.01: the first step is p - lr * g / (|g| + eps)."""
    run = first_step()
    got = run.on(kernel)
    for name, p in run.params.items():
        g = run.grads[0][name]
        want = p - 0.01 * g / (g.abs() + 1e-8)
        checks.close(got.after[1][name], want, f"{name} after step 1 vs p - lr*g/(|g|+eps)")


def check_first_moments(kernel, betas: tuple[float, float] | None) -> None:
    run = first_step(betas, seed=10)
    beta1, beta2 = betas or DEFAULTS["betas"]
    got = run.on(kernel, state=True)
    said = f"betas=({beta1}, {beta2})"
    for name in run.params:
        g = run.grads[0][name]
        count = step_count(got.state.get(name, {}).get("step"), f"state[{name}]['step']")
        if count != 1:
            raise checks.Failed(f"state[{name}]['step'] is {count:g} after one update, want 1")
        checks.close(
            moment(got.state, name, "exp_avg"),
            (1 - beta1) * g,
            f"state[{name}]['exp_avg'] after step 1 vs (1 - beta1)*g, {said}",
        )
        checks.close(
            moment(got.state, name, "exp_avg_sq"),
            (1 - beta2) * g * g,
            f"state[{name}]['exp_avg_sq'] after step 1 vs (1 - beta2)*g², {said}",
        )


@exercise.check("first step")
def first_step_moments(kernel):
    """After one step with the default betas: exp_avg = (1 - beta1) g, exp_avg_sq =
    (1 - beta2) g², step 1."""
    check_first_moments(kernel, None)


@exercise.check("first step")
def first_step_moments_follow_the_betas(kernel):
    """The same with betas=(0.8, 0.95): the group's betas, not constants."""
    check_first_moments(kernel, (0.8, 0.95))


# ---------------------------------------------------------------------------------------
# bias correction: weight_decay 0, three steps of gradients of several magnitudes


def three_steps(seed: int = 30) -> Run:
    params = {"w": noise(3, 4, seed=seed)}
    grads = [{"w": away_from_zero(3, 4, seed=seed + t, low=0.5, scale=2.0)} for t in range(1, 4)]
    return Run(params, grads, {"lr": 0.01, "weight_decay": 0.0})


@exercise.check("bias correction", points=2)
def three_steps_closed_form(kernel):
    """Steps 1 to 3 (weight_decay 0, the default betas) match the bias-corrected update
    written out."""
    run = three_steps()
    got = run.on(kernel)
    want = closed_form(run.params["w"], [g["w"] for g in run.grads], 0.01)
    for t, (theta, _, _) in enumerate(want, start=1):
        checks.close(got.after[t]["w"], theta, f"w after step {t} vs the update written out")


@exercise.check("bias correction")
def three_steps_moments(kernel):
    """After 3 steps: exp_avg and exp_avg_sq are the running averages of g and g²."""
    run = three_steps()
    got = run.on(kernel, state=True)
    _, m, v = closed_form(run.params["w"], [g["w"] for g in run.grads], 0.01)[-1]
    checks.close(moment(got.state, "w", "exp_avg"), m, "state[w]['exp_avg'] after step 3")
    checks.close(moment(got.state, "w", "exp_avg_sq"), v, "state[w]['exp_avg_sq'] after step 3")


# ---------------------------------------------------------------------------------------
# decoupled decay: lr 0.1, weight_decay 0.5, float64


def decaying(steps: int = 5, seed: int = 40) -> Run:
    """z gets gradients of zeros; w gets real ones."""
    params = {"z": noise(3, 3, seed=seed), "w": noise(4, seed=seed + 1)}
    grads = [{"z": torch.zeros(3, 3, dtype=F64), "w": away_from_zero(4, seed=seed + 2 + t)}
             for t in range(steps)]  # fmt: skip
    return Run(params, grads, {"lr": 0.1, "weight_decay": 0.5})


@exercise.check("decoupled decay", points=2, hidden=False)
def zero_gradient_parameter_decays_exactly(kernel):
    """A parameter whose gradients are zeros shrinks by (1 - lr*weight_decay) per step:
    0.95 with lr 0.1, weight_decay 0.5 (not by 1 - weight_decay, and no Adam step)."""
    run = decaying()
    got = run.on(kernel)
    z0 = run.params["z"]
    for t in range(1, len(run.grads) + 1):
        checks.close(got.after[t]["z"], z0 * 0.95**t, f"z (zero grads) after step {t} vs "
                     "z0 * (1 - lr*weight_decay)^t")  # fmt: skip


@exercise.check("decoupled decay")
def decay_factor_is_the_same_every_step(kernel):
    """For that parameter, z_t / z_(t-1) is the same at every step (the decay does not
    follow the bias correction)."""
    run = decaying()
    got = run.on(kernel)
    z0 = run.params["z"]
    path = [z0, *(checks.tensor(got.after[t]["z"], f"z after step {t}", z0.shape)
                  for t in sorted(got.after))]  # fmt: skip
    first = path[1] / path[0]
    for t in range(2, len(path)):
        ratio = path[t] / path[t - 1]
        checks.close(ratio, first, f"z's decay factor at step {t} vs at step 1")


@exercise.check("decoupled decay")
def decay_stays_out_of_the_moments(kernel):
    """With weight_decay 0.5, exp_avg and exp_avg_sq of w depend on its gradients only."""
    run = decaying(steps=3, seed=50)
    got = run.on(kernel, state=True)
    _, m, v = closed_form(run.params["w"], [g["w"] for g in run.grads], 0.1)[-1]
    checks.close(moment(got.state, "w", "exp_avg"), m, "state[w]['exp_avg'] with weight decay")
    checks.close(moment(got.state, "w", "exp_avg_sq"), v,
                 "state[w]['exp_avg_sq'] with weight decay")  # fmt: skip


# ---------------------------------------------------------------------------------------
# lockstep: 100 (50) float32 steps against torch.optim.AdamW

LONG = {"rtol": 1e-5, "atol": 1e-5}  # long float32 runs (the notebook says so)


@functools.cache
def lockstep(groups: bool, seed: int = 60) -> tuple[Run, Trajectory]:
    """100 float32 steps of w, b, e in one group, or 50 in two groups with gradients
    missing at some steps; with torch's trajectory (both kept: every grading uses them)."""
    steps = 50 if groups else 100
    shapes = {"w": (4, 6), "b": (6,), "e": (3, 4)}
    params = {n: noise(*s, seed=seed + i, dtype=F32) for i, (n, s) in enumerate(shapes.items())}
    grads = []
    for t in range(steps):
        step = {n: away_from_zero(*s, seed=seed + 1000 * (i + 1) + t, dtype=F32)
                for i, (n, s) in enumerate(shapes.items())}  # fmt: skip
        if groups and t % 7 == 3:
            del step["b"]
        if groups and 10 <= t < 20:
            del step["e"]
        grads.append(step)
    if not groups:
        run = Run(params, grads, {"lr": 0.02, "weight_decay": 0.2})
    else:
        layout: list[dict[str, Any]] = [
            {"params": ["w", "b"]},
            {"params": ["e"], "lr": 0.05, "betas": (0.8, 0.99), "weight_decay": 0.5},
        ]
        run = Run(params, grads, {"lr": 0.01, "weight_decay": 0.1}, layout)
    return run, run.reference()


@exercise.check("lockstep", points=2)
def lockstep_100_steps(kernel):
    """100 float32 steps (lr 0.02, weight_decay 0.2) match torch.optim.AdamW's, step by
    step (rtol 1e-5, atol 1e-5)."""
    run, want = lockstep(groups=False)
    same_run(run.on(kernel, every=10), want, "vs torch.optim.AdamW", **LONG)


@exercise.check("lockstep", points=2)
def lockstep_with_param_groups(kernel):
    """50 float32 steps with two param groups (the second: lr 0.05, betas (0.8, 0.99),
    weight_decay 0.5) and parameters whose grad is None at some steps."""
    run, want = lockstep(groups=True)
    same_run(run.on(kernel, every=10), want, "two param groups, vs torch.optim.AdamW", **LONG)


@exercise.check("lockstep", points=2)
def lockstep_with_a_scheduler(kernel):
    """A scheduler edits opt.param_groups[0] between steps: lr before each step t >= 2
    (0.05 * 0.8^t), weight_decay before step 4, betas before step 7. 10 float32 steps match
    torch.optim.AdamW given the same edits (float32's default tolerance)."""
    params = {"w": noise(4, 3, seed=170, dtype=F32), "b": noise(3, seed=171, dtype=F32)}
    grads = [{n: away_from_zero(*p.shape, seed=172 + 10 * i + t, dtype=F32) for i, (n, p) in
              enumerate(params.items())} for t in range(10)]  # fmt: skip
    edits: dict[int, dict[int, dict[str, Any]]] = {
        t: {0: {"lr": 0.05 * 0.8**t}} for t in range(2, 11)
    }
    edits[4][0]["weight_decay"] = 0.3
    edits[7][0]["betas"] = (0.8, 0.99)
    run = Run(params, grads, {"lr": 0.05, "weight_decay": 0.1}, edits=edits)
    got = run.on(kernel)
    groups = got.groups
    if not isinstance(groups, list) or not groups or not isinstance(groups[0], dict):
        raise checks.Interface(f"{CLASS}.param_groups: got {checks.describe(groups)}, want a "
                               "list of dicts")  # fmt: skip
    lr = groups[0].get("lr")
    if lr != 0.05 * 0.8**10:
        raise checks.Failed(
            f"{CLASS}.param_groups[0]['lr'] is {lr!r} after the group dict given was set to "
            f"{0.05 * 0.8**10!r}: keep the dicts given as param groups (torch.optim.Optimizer"
            ".__init__ does), where a scheduler changes them"
        )
    same_run(got, run.reference(), "lr, weight_decay and betas changed between steps, vs "
             "torch.optim.AdamW")  # fmt: skip


# ---------------------------------------------------------------------------------------
# eps placement: tiny gradients, where eps is as large as sqrt(v_hat)


def tiny(eps: float | None = None, scale: float = 1e-9, seed: int = 70, betas=None) -> Run:
    """5 steps of gradients ~`scale` from a parameter of zeros (weight_decay 0, lr 1e-3)."""
    params = {"w": torch.zeros(3, 5, dtype=F64)}
    grads = [{"w": away_from_zero(3, 5, seed=seed + t, scale=scale)} for t in range(1, 6)]
    options: dict[str, Any] = {"weight_decay": 0.0}
    if eps is not None:
        options["eps"] = eps
    if betas is not None:
        options["betas"] = betas
    return Run(params, grads, options)


@exercise.check("eps placement", points=2)
def tiny_gradients(kernel):
    """Gradients of about 1e-9 (eps 1e-8): 5 steps match torch.optim.AdamW."""
    run = tiny()
    same_run(run.on(kernel), run.reference(), "gradients ~1e-9, vs torch.optim.AdamW")


@exercise.check("eps placement")
def eps_outside_the_square_root(kernel):
    """With beta2 = 0 (falsy, honoured: sqrt(v_hat) = |g|, and no bias correction of v) and
    gradients of about 1e-9, the step is lr * m_hat / (|g| + eps), not
    lr * m_hat / sqrt(g² + eps)."""
    run = tiny(betas=(0.9, 0.0), seed=80)
    same_run(run.on(kernel), run.reference(), "beta2 = 0, gradients ~1e-9")


@exercise.check("eps placement")
def eps_is_the_groups(kernel):
    """eps=1e-6 with gradients of about 1e-7: the group's eps, not 1e-8."""
    run = tiny(eps=1e-6, scale=1e-7, seed=90)
    same_run(run.on(kernel), run.reference(), "eps 1e-6, gradients ~1e-7")


# ---------------------------------------------------------------------------------------
# edge cases


@exercise.check("edge cases")
def float64_parameters(kernel):
    """Float64 parameters near 1e4 (weight_decay 0, lr 1e-3): float64 state, and the
    displacement p_t - p_0 over 5 steps matches torch.optim.AdamW's at float64's default
    tolerance (float32 rounding of p, 1e-3 at 1e4, would swamp it)."""
    p0 = noise(5, 3, seed=100) + 1e4
    grads = [{"w": away_from_zero(5, 3, seed=110 + t)} for t in range(5)]
    run = Run({"w": p0}, grads, {"lr": 1e-3, "weight_decay": 0.0})
    got = run.on(kernel, state=True)
    for key in ("exp_avg", "exp_avg_sq"):
        value = moment(got.state, "w", key)
        if value.dtype != F64:
            raise checks.Failed(f"state[w][{key!r}] is {value.dtype} for a float64 "
                                "parameter: keep the parameter's dtype")  # fmt: skip
    want = run.reference()
    for t in sorted(got.after):
        after = checks.tensor(got.after[t].get("w"), f"w after step {t}", p0.shape)
        checks.close(after - p0, want.after[t]["w"] - p0,
                     f"w - w0 after step {t} (float64 w ~ 1e4), vs torch.optim.AdamW")  # fmt: skip


@exercise.check("edge cases")
def zero_lr_changes_nothing(kernel):
    """lr=0: the parameters stay exactly as they were."""
    params = {"w": noise(4, 3, seed=120)}
    grads = [{"w": noise(4, 3, seed=121 + t)} for t in range(3)]
    got = Run(params, grads, {"lr": 0.0, "weight_decay": 0.0}).on(kernel)
    for t, after in got.after.items():
        checks.equal(after["w"], params["w"], f"w after step {t} with lr=0")


@exercise.check("edge cases")
def no_weight_decay_is_adam(kernel):
    """weight_decay=0 (falsy, not taken for the default): 10 steps match torch.optim.Adam
    (float64)."""
    params = {"w": noise(3, 3, seed=130)}
    grads = [{"w": away_from_zero(3, 3, seed=131 + t)} for t in range(10)]
    run = Run(params, grads, {"lr": 0.05, "weight_decay": 0.0})
    same_run(run.on(kernel), run.reference(decoupled=False), "vs torch.optim.Adam")


@exercise.check("edge cases")
def scalar_parameter(kernel):
    """A 0-dim float32 parameter: 5 steps match torch.optim.AdamW at float32's default
    tolerance."""
    params = {"s": noise(1, seed=141, dtype=F32)[0]}
    grads = [{"s": away_from_zero(1, seed=150 + t, dtype=F32)[0]} for t in range(5)]
    run = Run(params, grads, {"lr": 0.05, "weight_decay": 0.0})
    same_run(run.on(kernel), run.reference(), "0-dim, vs torch.optim.AdamW")


@exercise.check("edge cases")
def non_contiguous_parameter(kernel):
    """A transposed (non-contiguous) float32 parameter, with gradients in its layout (no
    .view(-1) possible): 5 steps match torch.optim.AdamW at float32's default tolerance."""
    params = {"t": noise(5, 3, seed=140, dtype=F32).t()}
    grads = [{"t": away_from_zero(5, 3, seed=160 + t, dtype=F32).t()} for t in range(5)]
    run = Run(params, grads, {"lr": 0.05, "weight_decay": 0.0})
    same_run(run.on(kernel), run.reference(), "non-contiguous, vs torch.optim.AdamW")


# ---------------------------------------------------------------------------------------
# from scratch


def a_few_steps(kernel) -> None:
    """Two steps of one parameter with the default options, so a stub answers first (the
    watch saw every step the other tests made)."""
    Run({"w": noise(3, seed=180)}, [{"w": noise(3, seed=181 + t)} for t in range(2)]).on(kernel)


@exercise.check("from scratch")
def no_builtin_adam_in_source(kernel):
    """The notebook's code names none of torch's Adam family (AdamW, Adam, NAdam, RAdam,
    Adamax, SparseAdam, their functional forms, torch._fused_adam(w)_)."""
    a_few_steps(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch")
def no_builtin_adam_at_run_time(kernel):
    """No update function of torch's Adam family runs while the optimizer steps (a subclass
    calling super().step() included); torch._foreach_* ops are fine."""
    a_few_steps(kernel)
    require_nothing_seen(kernel.seen)
