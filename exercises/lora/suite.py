"""Hidden suite of `lora`: a LoRA linear layer with PEFT's conventions (EXERCISES_CANON.md §3).

The candidate writes `LoRALinear(base, r, alpha=None, dropout=0.0, use_rslora=False)` around a
given `nn.Linear`, which the suite builds in the kernel (`torch.nn.Linear` reached through the
notebook's `torch`) and fills with seeded weights. Values are compared with the closed form
`x Wᵀ + b + scaling (x Aᵀ) Bᵀ` in float64, from the weights the suite loaded.

One bug, one place. Sizes: in 37, out 23, r 4 (all different, so a transposed matrix raises
or shows in a shape). The values level uses alpha 16 (scaling 4, so `alpha`, `r / alpha` and
`alpha / sqrt(r)` all differ); the levels that compare with the reference (dropout,
gradients, most of robustness) pass alpha = r (scaling 1), leave dropout at 0 and the module
in its default (train) mode, except where that is the point. The merge level uses alpha 16
but compares with the notebook's own `delta_weight()` and its own unmerged outputs, so a
scaling bug is not counted again there (and a merge that forgets the scaling shows). The
dropout test recovers the mask from the output (a 4 -> 6 layer with A = I, so the LoRA
path's input is solvable), so any mask drawn as inverted dropout is accepted and no RNG
order is pinned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_no_builtin_module

F32, F64 = torch.float32, torch.float64
CLASS = "LoRALinear"
IN, OUT, R = 37, 23, 4
ALPHA = 16.0  # scaling 4 at r = 4; 8 with rsLoRA
NAMES = ("base.weight", "base.bias", "lora_A", "lora_B")
SHAPES = {"base.weight": (OUT, IN), "base.bias": (OUT,), "lora_A": (R, IN), "lora_B": (OUT, R)}

# LoRA libraries: the kernel cannot import them (only torch, numpy and einops are allowed);
# their layer types are named here so that a module built from one is refused all the same
LIBRARY_MODULES = frozenset({
    "peft.tuners.lora.layer.LoraLayer",
    "peft.tuners.lora.layer.Linear",
    "peft.tuners.tuners_utils.BaseTunerLayer",
    "loralib.layers.LoRALayer",
    "loralib.layers.Linear",
    "torchtune.modules.peft.lora.LoRALinear",
})  # fmt: skip

exercise = Exercise(
    id="lora",
    tags=("fine-tuning", "modules"),
    minutes=35,
    title="LoRA linear layer: init, scaling, dropout, merge and unmerge (PEFT's conventions)",
    seed="-",
    levels=[
        "parameters",
        "init",
        "values",
        "dropout",
        "gradients",
        "merge",
        "robustness",
        "from scratch",
    ],
    defines=(CLASS,),
    watch=Watch(what="LoRA library", modules=LIBRARY_MODULES),
)


# --- inputs, the base layer, the reference ------------------------------------------------


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F32) -> torch.Tensor:
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def away_from_zero(*shape: int, seed: int, low: float = 0.3) -> torch.Tensor:
    """Seeded float32 values with |x| >= low (a dropped entry is then never mistaken for a
    kept one)."""
    x = lib.randn(*shape, seed=seed, dtype=F64)
    return torch.where(x.abs() < low, x.sign() * low + x, x).to(F32)


@dataclass
class Layer:
    """A candidate LoRALinear in the kernel, the nn.Linear it wraps (`given`, the object the
    suite passed in) and the weights the suite put there (A and B: None when left at init)."""

    lora: Any
    given: Any
    W: torch.Tensor
    b: torch.Tensor | None
    A: torch.Tensor | None = None
    B: torch.Tensor | None = None
    scaling: float = 1.0

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """x Wᵀ + b + scaling (x Aᵀ) Bᵀ in float64, with the loaded A and B."""
        x64 = x.to(F64)
        y = x64 @ self.W.to(F64).T
        if self.b is not None:
            y = y + self.b.to(F64)
        if self.A is not None and self.B is not None:
            y = y + self.scaling * (x64 @ self.A.to(F64).T) @ self.B.to(F64).T
        return y

    def base_output(self, x: torch.Tensor) -> torch.Tensor:
        """x Wᵀ + b in float64."""
        y = x.to(F64) @ self.W.to(F64).T
        return y if self.b is None else y + self.b.to(F64)


def given_linear(kernel, n_in: int, n_out: int, seed: int, bias: bool = True):
    """An nn.Linear(n_in, n_out) made in the kernel, holding seeded weights; (remote, W, b)."""
    nn = kernel.attribute(kernel.get("torch"), "nn")
    linear = nn.Linear(n_in, n_out, bias=bias)
    W = randn(n_out, n_in, seed=seed, scale=0.2)
    b = randn(n_out, seed=seed + 1, scale=0.5) if bias else None
    lib.load_state(linear, "nn.Linear", {"weight": W} if b is None else {"weight": W, "bias": b})
    return linear, W, b


def build(kernel, *, r: int = R, alpha: float | None = R, load: bool = True,
          seed: int = 0, n_in: int = IN, n_out: int = OUT, bias: bool = True,
          **options: Any) -> Layer:  # fmt: skip
    """LoRALinear(base, r, alpha, **options) over a seeded nn.Linear; with `load`, seeded
    nonzero A and B loaded into it. alpha defaults to r here (scaling 1), not to the class's
    default: only the values level is about the scaling."""
    given, W, b = given_linear(kernel, n_in, n_out, seed=100 + seed, bias=bias)
    kwargs = dict(options) if alpha is None else {"alpha": alpha, **options}
    lora = kernel.new(CLASS, given, r, **kwargs)
    scaling = (r if alpha is None else alpha) / (math.sqrt(r) if options.get("use_rslora") else r)
    layer = Layer(lora, given, W, b, scaling=scaling)
    if load:
        layer.A = randn(r, n_in, seed=200 + seed, scale=0.2)
        layer.B = randn(n_out, r, seed=300 + seed, scale=0.5)
        lib.load_state(lora, CLASS, {"lora_A": layer.A, "lora_B": layer.B})
    return layer


def output(value: Any, x: torch.Tensor, what: str, n_out: int = OUT) -> torch.Tensor:
    """A tensor of shape (..., out_features) in x's dtype."""
    y = checks.tensor(value, what, (*x.shape[:-1], n_out))
    if y.dtype != x.dtype:
        raise checks.Failed(f"{what} has dtype {str(y.dtype)[6:]}, want {str(x.dtype)[6:]} "
                            "(x's dtype)")  # fmt: skip
    return y


def matches(layer: Layer, x: torch.Tensor, what: str, *, call: Any = None) -> torch.Tensor:
    """The layer's output on x (or `call`'s answer) matches the float64 reference."""
    y = output(layer.lora(x) if call is None else call, x, what)
    checks.close(y, layer.reference(x), f"{what} vs x Wᵀ + b + scaling (x Aᵀ) Bᵀ")
    return y


def scaled_like_reference(layer: Layer, x: torch.Tensor, what: str, alpha: float, r: int,
                          ) -> torch.Tensor:  # fmt: skip
    """`matches`, and when the output is base(x) plus the update at another scale, a message
    naming the scale used (alpha, r / alpha, alpha / sqrt(r), ...)."""
    y = output(layer.lora(x), x, what)
    update = y.to(F64) - layer.base_output(x)
    A, B = cast(torch.Tensor, layer.A), cast(torch.Tensor, layer.B)
    unit = (x.to(F64) @ A.to(F64).T) @ B.to(F64).T
    used = float((update * unit).sum() / (unit * unit).sum())
    fits = float((update - used * unit).norm()) <= 1e-4 * float(unit.norm()) * max(abs(used), 1)
    if fits and abs(used - layer.scaling) > 1e-4 * max(abs(layer.scaling), 1e-3):
        formulas = {"alpha": alpha, "r / alpha": r / alpha if alpha else math.inf,
                    "alpha / sqrt(r)": alpha / math.sqrt(r), "alpha / r": alpha / r,
                    "1": 1.0, "0": 0.0}  # fmt: skip
        named = [n for n, v in formulas.items() if abs(used - v) <= 1e-4 * max(abs(v), 1e-3)]
        said = f" ({named[0]})" if named else ""
        raise checks.Failed(f"{what}: the update is scaled by {used:.4g}{said}, want "
                            f"{layer.scaling:.4g}")  # fmt: skip
    checks.close(y, layer.reference(x), f"{what} vs x Wᵀ + b + scaling (x Aᵀ) Bᵀ")
    return y


def state(layer: Layer, owner: str = CLASS) -> dict[str, torch.Tensor]:
    """base.weight, lora_A and lora_B from the candidate's state_dict (shapes checked)."""
    names = ["base.weight", "lora_A", "lora_B"]
    return lib.require_state(lib.state_dict(layer.lora, owner), names, owner, SHAPES)


def merged_flag(kernel, layer: Layer, want: bool, when: str) -> None:
    """layer.merged is the bool `want`."""
    got = kernel.attribute(layer.lora, "merged")
    if got is not want:
        raise checks.Failed(f"{CLASS}.merged {when}: got {checks.describe(got)}, want {want}")


def delta(layer: Layer, what: str = "delta_weight()") -> torch.Tensor:
    """The notebook's own delta_weight(), shape (out, in)."""
    return checks.tensor(layer.lora.delta_weight(), what, (OUT, IN))


def gradients(kernel, layer: Layer, x: torch.Tensor, cotangent: torch.Tensor) -> dict:
    """Backprop sum(layer(x) * cotangent): {'x': grad, 'params': {name: grad or None}}."""
    got = kernel.grad(layer.lora, (x,), {}, wrt=[0], cotangent=cotangent)
    params = got["params"]
    if not isinstance(params, dict):
        raise checks.Interface(f"{CLASS}'s parameters: got {checks.describe(params)}")
    return {"x": got["inputs"][0], "params": params}


def parameter_grad(params: dict, name: str) -> Any:
    """The gradient of one named parameter (None when it got none); an Interface failure
    when the module has no such parameter."""
    if name not in params:
        found = ", ".join(sorted(map(str, params))) or "none"
        raise checks.Interface(f"{CLASS} has no parameter {name} (parameters: {found})")
    return params[name]


def reference_grads(layer: Layer, x: torch.Tensor, cotangent: torch.Tensor) -> dict:
    """Gradients of sum(reference(x) * cotangent) w.r.t. x, A and B (float64 autograd)."""
    x64 = x.to(F64).requires_grad_(True)
    A, B, b = (cast(torch.Tensor, t) for t in (layer.A, layer.B, layer.b))
    A64, B64 = A.to(F64).requires_grad_(True), B.to(F64).requires_grad_(True)
    y = x64 @ layer.W.to(F64).T + b.to(F64) + layer.scaling * (x64 @ A64.T) @ B64.T
    (y * cotangent.to(F64)).sum().backward()
    return {"x": x64.grad, "lora_A": A64.grad, "lora_B": B64.grad}


# --- parameters --------------------------------------------------------------------------


@exercise.check("parameters", hidden=False)
def state_dict_holds_base_and_adapters(kernel):
    """LoRALinear(Linear(37, 23), r=4, alpha=16): state_dict() holds exactly base.weight
    (23, 37), base.bias (23,), lora_A (4, 37) and lora_B (23, 4)."""
    layer = build(kernel, alpha=ALPHA, load=False)
    held = lib.state_dict(layer.lora, CLASS)
    if set(held) != set(NAMES):
        found = ", ".join(sorted(map(str, held))) or "nothing"
        raise checks.Failed(f"{CLASS}.state_dict() holds {found}; want exactly "
                            f"{', '.join(NAMES)}")  # fmt: skip
    lib.require_state(held, list(NAMES), CLASS, SHAPES)


@exercise.check("parameters")
def base_values_are_kept(kernel):
    """Wrapping keeps the given layer's weight and bias as they were (values, not a new
    nn.Linear)."""
    layer = build(kernel, load=False)
    held = lib.require_state(lib.state_dict(layer.lora, CLASS), ["base.weight", "base.bias"],
                             CLASS, SHAPES)  # fmt: skip
    checks.equal(held["base.weight"], layer.W, f"{CLASS}.base.weight after construction")
    checks.equal(held["base.bias"], cast(torch.Tensor, layer.b),
                 f"{CLASS}.base.bias after construction")  # fmt: skip


@exercise.check("parameters")
def base_is_frozen(kernel):
    """Backprop through a new layer gives base.weight and base.bias no gradient (frozen:
    requires_grad False), while lora_A and lora_B are parameters of the module."""
    layer = build(kernel, load=False)
    x, r = randn(5, IN, seed=11), randn(5, OUT, seed=12)
    params = gradients(kernel, layer, x, r)["params"]
    for name in ("lora_A", "lora_B"):
        parameter_grad(params, name)
    for name in ("base.weight", "base.bias"):
        if parameter_grad(params, name) is not None:
            raise checks.Failed(f"{name} got a gradient: freeze the base layer "
                                "(requires_grad=False on its weight and bias)")  # fmt: skip


@exercise.check("parameters")
def output_shapes(kernel):
    """x of shape (6, 37), (2, 3, 37) and (37,) gives (6, 23), (2, 3, 23) and (23,), float32."""
    layer = build(kernel, load=False)
    xs = [randn(6, IN, seed=13), randn(2, 3, IN, seed=14), randn(IN, seed=15)]
    for x, y in zip(xs, kernel.many(layer.lora, [((x,), {}) for x in xs]), strict=True):
        output(y, x, f"{CLASS}(x of shape {tuple(x.shape)})")


@exercise.check("parameters")
def rank_below_one_raises(kernel):
    """r = 0 and a negative r raise ValueError."""
    given, _, _ = given_linear(kernel, IN, OUT, seed=16)
    for r, what in ((0, "rank zero (r = 0)"), (-1, "a negative rank (r = -1)")):
        lib.raises(lambda r: kernel.new(CLASS, given, r), [r], "ValueError",
                   f"{CLASS}(base, r) with {what}")  # fmt: skip


@exercise.check("parameters")
def adapters_take_the_base_dtype(kernel):
    """Over a float64 nn.Linear, lora_A and lora_B are float64 (base.weight's dtype), and a
    float64 x gives a float64 output."""
    given, _, _ = given_linear(kernel, IN, OUT, seed=17)
    given.double()  # nn.Module.double converts the layer in place
    lora = kernel.new(CLASS, given, R, alpha=R)
    held = lib.require_state(lib.state_dict(lora, CLASS), ["lora_A", "lora_B"], CLASS, SHAPES)
    for name in ("lora_A", "lora_B"):
        if held[name].dtype != F64:
            raise checks.Failed(f"{CLASS}(a float64 base).{name} is {str(held[name].dtype)[6:]}, "
                                "want float64 (base.weight's dtype)")  # fmt: skip
    x = randn(3, IN, seed=18).to(F64)
    output(lora(x), x, f"{CLASS}(a float64 base)(a float64 x)")


# --- init --------------------------------------------------------------------------------


@exercise.check("init")
def lora_B_starts_at_zero(kernel):
    """lora_B is exactly zero after construction."""
    layer = build(kernel, alpha=ALPHA, load=False)
    lib.exactly_zero(state(layer)["lora_B"], f"{CLASS}.lora_B after construction")


@exercise.check("init")
def lora_A_is_kaiming_uniform(kernel):
    """lora_A (4 x 37) lies within 1/sqrt(in_features) (kaiming_uniform_ with a = sqrt(5)), and
    fills that range: max |A| > 0.8/sqrt(37), both signs. For a correct init the chance that
    148 uniform draws stay within 0.8 of the bound is 0.8^148 = 5e-15."""
    A = state(build(kernel, alpha=ALPHA, load=False))["lora_A"].to(F64)
    bound = 1 / math.sqrt(IN)
    top = float(A.abs().max())
    if top > 3 * bound:
        raise checks.Failed(f"max |lora_A| is {top:.3g}, far beyond 1/sqrt(in_features) = "
                            f"{bound:.4f}: not kaiming_uniform_(a=sqrt(5))")  # fmt: skip
    if top > bound * (1 + 1e-6):
        raise checks.Failed(f"max |lora_A| is {top:.4f}, above 1/sqrt(in_features) = "
                            f"{bound:.4f}: kaiming_uniform_ wants a=sqrt(5)")  # fmt: skip
    if top < 0.8 * bound or float(A.min()) >= 0 or float(A.max()) <= 0:
        raise checks.Failed(f"lora_A spans [{float(A.min()):.4f}, {float(A.max()):.4f}], want "
                            f"uniform draws filling [-{bound:.4f}, {bound:.4f}]")  # fmt: skip


@exercise.check("init")
def starts_as_the_base_layer(kernel):
    """At construction the layer computes exactly what the base layer computes (B = 0)."""
    layer = build(kernel, alpha=ALPHA, load=False)
    x = randn(6, IN, seed=21)
    want = checks.tensor(layer.given(x), "base(x)", (6, OUT))
    checks.equal(output(layer.lora(x), x, f"{CLASS}(x)"), want, f"{CLASS}(x) at init vs base(x)")


# --- values ------------------------------------------------------------------------------


@exercise.check("values", points=2, hidden=False)
def forward_matches_reference(kernel):
    """r = 4, alpha = 16 (scaling 4), given A and B: the output is x Wᵀ + b + 4 (x Aᵀ) Bᵀ."""
    layer = build(kernel, alpha=ALPHA, seed=1)
    scaled_like_reference(layer, randn(6, IN, seed=31), f"{CLASS}(x), alpha 16, r 4", ALPHA, R)


@exercise.check("values")
def rslora_scaling(kernel):
    """use_rslora=True: scaling alpha / sqrt(r) = 16 / 2 = 8."""
    layer = build(kernel, alpha=ALPHA, use_rslora=True, seed=2)
    x = randn(6, IN, seed=32)
    scaled_like_reference(layer, x, f"{CLASS}(x), alpha 16, r 4, use_rslora", ALPHA, R)


@exercise.check("values")
def alpha_defaults_to_r(kernel):
    """alpha left out (None) means alpha = r: scaling 1."""
    layer = build(kernel, alpha=None, seed=3)
    scaled_like_reference(layer, randn(6, IN, seed=33), f"{CLASS}(x), alpha not given", R, R)


@exercise.check("values")
def zero_alpha_turns_the_adapter_off(kernel):
    """alpha = 0.0 (falsy) is the alpha used: scaling 0, the output is base(x)."""
    layer = build(kernel, alpha=0.0, seed=4)
    scaled_like_reference(layer, randn(6, IN, seed=34), f"{CLASS}(x), alpha 0.0", 0.0, R)


@exercise.check("values")
def rank_one(kernel):
    """r = 1, alpha = 2: A (1, 37), B (23, 1), scaling 2."""
    layer = build(kernel, r=1, alpha=2.0, seed=5)
    scaled_like_reference(layer, randn(6, IN, seed=35), f"{CLASS}(x), r 1, alpha 2", 2.0, 1)


@exercise.check("values")
def delta_weight_is_scaled_B_times_A(kernel):
    """delta_weight() is scaling * B @ A, of shape (out, in): 4 B A at alpha 16, r 4."""
    layer = build(kernel, alpha=ALPHA, seed=6)
    A, B = cast(torch.Tensor, layer.A), cast(torch.Tensor, layer.B)
    want = layer.scaling * B.to(F64) @ A.to(F64)
    checks.close(delta(layer), want, "delta_weight() vs scaling * lora_B @ lora_A")


@exercise.check("values")
def base_without_bias(kernel):
    """A base nn.Linear without a bias (bias None): the output is x Wᵀ + 4 (x Aᵀ) Bᵀ."""
    layer = build(kernel, alpha=ALPHA, bias=False, seed=7)
    matches(layer, randn(6, IN, seed=37), f"{CLASS}(x) over a Linear without bias")


# --- dropout -----------------------------------------------------------------------------


@exercise.check("dropout")
def dropout_leaves_the_base_path_alone(kernel):
    """Train mode, dropout 0.9, B = 0 (loaded): the output is still base(x), as the base path
    never sees dropout."""
    layer = build(kernel, load=False, dropout=0.9)
    lib.load_state(layer.lora, CLASS, {"lora_A": randn(R, IN, seed=40, scale=0.2),
                                       "lora_B": torch.zeros(OUT, R)})  # fmt: skip
    x = randn(6, IN, seed=41)
    want = checks.tensor(layer.given(x), "base(x)", (6, OUT))
    got = output(layer.lora.seeded(41)(x), x, f"{CLASS}(x), train mode, dropout 0.9, B = 0")
    checks.close(got, want, f"{CLASS}(x), train mode, dropout 0.9, B = 0, vs base(x)")


def lora_input(layer: Layer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What the LoRA path was given, read from the output: y = base(x) + d Aᵀ Bᵀ with A = I
    and scaling 1, so d = (y - base(x)) pinv(Bᵀ) (B has full column rank)."""
    B = cast(torch.Tensor, layer.B)
    return (y.to(F64) - layer.base_output(x)) @ torch.linalg.pinv(B.to(F64).T)


@exercise.check("dropout", points=2)
def dropout_masks_the_lora_input(kernel):
    """Train mode, dropout 0.25 on a 4 -> 6 layer with A = I (so the LoRA path's input can be
    read back from the output): every entry of it is 0 or x / 0.75, and 15-35% are dropped.
    For a correct layer (800 entries, each dropped with probability 0.25) the chance of a
    fraction outside that range is below 1e-10."""
    n_in, n_out, p = 4, 6, 0.25
    layer = build(kernel, r=n_in, load=False, n_in=n_in, n_out=n_out, dropout=p, seed=8)
    layer.A, layer.B = torch.eye(n_in), randn(n_out, n_in, seed=42)
    lib.load_state(layer.lora, CLASS, {"lora_A": layer.A, "lora_B": layer.B})
    x = away_from_zero(200, n_in, seed=43)
    what = f"{CLASS}(x), train mode, dropout 0.25"
    d = lora_input(layer, x, output(layer.lora.seeded(43)(x), x, what, n_out))
    x64 = x.to(F64)
    tol = 1e-3 * (1 + x64.abs())
    dropped, kept = d.abs() <= tol, (d - x64 / (1 - p)).abs() <= tol
    if not bool((dropped | kept).all()):
        if bool((dropped | ((d - x64).abs() <= tol)).all()):
            raise checks.Failed(f"{what}: the LoRA path got entries of x kept as they were; "
                                "want them divided by 1 - dropout (inverted dropout)")  # fmt: skip
        bad = int((~(dropped | kept)).sum())
        raise checks.Failed(f"{what}: the LoRA path's input has {bad} of {d.numel()} entries "
                            "neither 0 nor x / (1 - dropout): dropout belongs on x, before "
                            "lora_A, and nowhere else")  # fmt: skip
    fraction = float(dropped.double().mean())
    if not 0.15 <= fraction <= 0.35:
        raise checks.Failed(f"{what}: {fraction:.1%} of the LoRA path's input was dropped, "
                            "want about 25%")  # fmt: skip


@exercise.check("dropout")
def eval_mode_has_no_dropout(kernel):
    """Eval mode, dropout 0.5: no dropout (the same output under two RNG seeds, equal to the
    reference without dropout)."""
    layer = build(kernel, dropout=0.5, seed=9)
    x = randn(6, IN, seed=44)
    lib.eval_mode_is_deterministic(layer.lora, lambda m: output(m(x), x, f"{CLASS}(x)"),
                                   layer.reference(x), f"{CLASS}(x), dropout 0.5,")  # fmt: skip


@exercise.check("dropout")
def zero_dropout_in_train_mode(kernel):
    """dropout = 0.0 (falsy) in train mode means no dropout: the output is the reference's."""
    layer = build(kernel, dropout=0.0, seed=10)
    x = randn(6, IN, seed=45)
    matches(layer, x, f"{CLASS}(x), train mode, dropout 0.0", call=layer.lora.seeded(45)(x))


# --- gradients ---------------------------------------------------------------------------


@exercise.check("gradients")
def gradients_while_B_is_zero(kernel):
    """With B = 0 (as at init; loaded here, with a random A): lora_A's gradient is exactly 0,
    lora_B's is rᵀ (x Aᵀ), and x's is r W (as autograd gives)."""
    layer = build(kernel, load=False, seed=11)
    layer.A, layer.B = randn(R, IN, seed=50, scale=0.2), torch.zeros(OUT, R)
    lib.load_state(layer.lora, CLASS, {"lora_A": layer.A, "lora_B": layer.B})
    x, r = randn(6, IN, seed=51), randn(6, OUT, seed=52)
    got, want = gradients(kernel, layer, x, r), reference_grads(layer, x, r)
    gA = parameter_grad(got["params"], "lora_A")
    if gA is None:
        raise checks.Failed("lora_A got no gradient, want one of zeros (is it detached?)")
    lib.exactly_zero(checks.tensor(gA, "gradient of lora_A", (R, IN)),
                     "gradient of lora_A while B = 0")  # fmt: skip
    gB = parameter_grad(got["params"], "lora_B")
    if gB is None:
        raise checks.Failed("lora_B got no gradient, want one (is it detached?)")
    checks.close(checks.tensor(gB, "gradient of lora_B", (OUT, R)), want["lora_B"],
                 "gradient of lora_B while B = 0 vs autograd")  # fmt: skip
    checks.close(checks.tensor(got["x"], "gradient of x", x.shape), want["x"],
                 "gradient of x while B = 0 vs autograd")  # fmt: skip


@exercise.check("gradients", points=2)
def gradients_match_autograd(kernel):
    """Given A and B: the gradients of x, lora_A and lora_B match float64 autograd through
    x Wᵀ + b + (x Aᵀ) Bᵀ."""
    layer = build(kernel, seed=12)
    x, r = randn(6, IN, seed=53), randn(6, OUT, seed=54)
    got, want = gradients(kernel, layer, x, r), reference_grads(layer, x, r)
    for name, shape in (("lora_A", (R, IN)), ("lora_B", (OUT, R))):
        g = parameter_grad(got["params"], name)
        if g is None:
            raise checks.Failed(f"{name} got no gradient, want one (is it detached?)")
        checks.close(checks.tensor(g, f"gradient of {name}", shape), want[name],
                     f"gradient of {name} vs autograd")  # fmt: skip
    checks.close(checks.tensor(got["x"], "gradient of x", x.shape), want["x"],
                 "gradient of x vs autograd (through both paths)")  # fmt: skip


# --- merge: compared with the notebook's own delta_weight() and unmerged outputs ----------


@exercise.check("merge", hidden=False)
def merge_adds_delta_weight(kernel):
    """merge() adds delta_weight() to base.weight, sets merged, and leaves lora_A and lora_B
    as they were."""
    layer = build(kernel, alpha=ALPHA, seed=13)
    change = delta(layer)
    merged_flag(kernel, layer, False, "after construction")
    layer.lora.merge()
    now = state(layer)
    checks.close(now["base.weight"], layer.W.to(F64) + change.to(F64),
                 "base.weight after merge() vs W + delta_weight()")  # fmt: skip
    merged_flag(kernel, layer, True, "after merge()")
    checks.equal(now["lora_A"], cast(torch.Tensor, layer.A), "lora_A after merge()")
    checks.equal(now["lora_B"], cast(torch.Tensor, layer.B), "lora_B after merge()")


@exercise.check("merge")
def merged_forward_equals_unmerged(kernel):
    """After merge() the output is the same as before (base(x) with the merged weight)."""
    layer = build(kernel, alpha=ALPHA, seed=14)
    x = randn(6, IN, seed=61)
    before = output(layer.lora(x), x, f"{CLASS}(x) before merge()")
    layer.lora.merge()
    after = output(layer.lora(x), x, f"{CLASS}(x) after merge()")
    checks.same(after, before, f"{CLASS}(x) after merge() vs before")


@exercise.check("merge")
def merge_writes_into_the_given_layer(kernel):
    """merge() changes the weight of the nn.Linear that was passed in (self.base is that
    layer, not a copy)."""
    layer = build(kernel, alpha=ALPHA, seed=15)
    change = delta(layer)
    layer.lora.merge()
    weight = lib.require_state(lib.state_dict(layer.given, "the given nn.Linear"), ["weight"],
                               "the given nn.Linear", {"weight": (OUT, IN)})["weight"]  # fmt: skip
    checks.close(weight, layer.W.to(F64) + change.to(F64),
                 "the given nn.Linear's weight after merge() vs W + delta_weight()")  # fmt: skip


@exercise.check("merge")
def merge_twice_is_merge_once(kernel):
    """merge() on a merged layer does nothing: base.weight is W + delta_weight() once."""
    layer = build(kernel, alpha=ALPHA, seed=16)
    change = delta(layer)
    layer.lora.merge()
    layer.lora.merge()
    checks.close(state(layer)["base.weight"], layer.W.to(F64) + change.to(F64),
                 "base.weight after merge() twice vs W + delta_weight()")  # fmt: skip


@exercise.check("merge")
def unmerge_restores_the_base_layer(kernel):
    """merge() then unmerge(): base.weight is W again (up to rounding), merged is False, and
    the output is the unmerged one (the LoRA path is back)."""
    layer = build(kernel, alpha=ALPHA, seed=17)
    x = randn(6, IN, seed=62)
    before = output(layer.lora(x), x, f"{CLASS}(x) before merge()")
    layer.lora.merge()
    layer.lora.unmerge()
    checks.close(state(layer)["base.weight"], layer.W, "base.weight after merge(), unmerge()")
    merged_flag(kernel, layer, False, "after merge(), unmerge()")
    after = output(layer.lora(x), x, f"{CLASS}(x) after merge(), unmerge()")
    checks.same(after, before, f"{CLASS}(x) after merge(), unmerge() vs before")


@exercise.check("merge")
def unmerge_without_merge_does_nothing(kernel):
    """unmerge() on a layer that is not merged changes nothing: base.weight stays exactly W."""
    layer = build(kernel, alpha=ALPHA, seed=18)
    layer.lora.unmerge()
    checks.equal(state(layer)["base.weight"], layer.W, "base.weight after unmerge() alone")
    merged_flag(kernel, layer, False, "after unmerge() alone")


@exercise.check("merge")
def merge_unmerge_merge(kernel):
    """State across steps: merge, unmerge, merge again: the weight is W + delta_weight(), and
    the output after each step equals the unmerged output."""
    layer = build(kernel, alpha=ALPHA, seed=19)
    x = randn(6, IN, seed=63)
    change = delta(layer)
    first = output(layer.lora(x), x, f"{CLASS}(x)")
    for step in ("merge", "unmerge", "merge"):
        getattr(layer.lora, step)()
        now = output(layer.lora(x), x, f"{CLASS}(x) after merge, unmerge, merge")
        checks.same(now, first, f"{CLASS}(x) after {step}() in merge, unmerge, merge vs before")
    checks.close(state(layer)["base.weight"], layer.W.to(F64) + change.to(F64),
                 "base.weight after merge, unmerge, merge vs W + delta_weight()")  # fmt: skip
    merged_flag(kernel, layer, True, "after merge, unmerge, merge")


@exercise.check("merge")
def merged_adapter_gets_no_gradient(kernel):
    """While merged, backprop reaches x only: lora_A and lora_B get no gradient (merge() runs
    under torch.no_grad(), so the merged weight holds no graph)."""
    layer = build(kernel, alpha=ALPHA, seed=20)
    layer.lora.merge()
    x, r = randn(6, IN, seed=64), randn(6, OUT, seed=65)
    params = gradients(kernel, layer, x, r)["params"]
    for name in ("lora_A", "lora_B"):
        if parameter_grad(params, name) is not None:
            raise checks.Failed(f"{name} got a gradient through the merged layer, want none: "
                                "merge under torch.no_grad()")  # fmt: skip


# --- robustness --------------------------------------------------------------------------


@exercise.check("robustness")
def eval_and_train_never_merge(kernel):
    """eval() and train() leave base.weight exactly W and merged False; eval-mode output
    matches the reference."""
    layer = build(kernel, seed=21)
    x = randn(6, IN, seed=71)
    layer.lora.eval()
    checks.equal(state(layer)["base.weight"], layer.W, "base.weight after eval()")
    merged_flag(kernel, layer, False, "after eval()")
    matches(layer, x, f"{CLASS}(x) in eval mode")
    layer.lora.train()
    checks.equal(state(layer)["base.weight"], layer.W, "base.weight after eval(), train()")


@exercise.check("robustness")
def non_contiguous_input(kernel):
    """A non-contiguous x (2, 3, 37) (no .view possible) gives the reference's values."""
    layer = build(kernel, seed=22)
    x = lib.noncontiguous(randn(2, 3, IN, seed=72))
    matches(layer, x, f"{CLASS}(non-contiguous x)")


@exercise.check("robustness")
def float64_large_magnitudes(kernel):
    """The module converted with .to(torch.float64), x ~ 1e4 in float64, alpha 16: float64
    kept throughout (float32 rounding would show at rtol 1e-7)."""
    layer = build(kernel, alpha=ALPHA, seed=23)
    layer.lora.to(F64)
    x = randn(6, IN, seed=73, scale=1e4, dtype=F64)
    matches(layer, x, f"{CLASS} in float64 (x ~ 1e4)")


@exercise.check("robustness")
def input_left_unchanged(kernel):
    """x is left unchanged by a call in train mode with dropout 0.5, in eval mode, and while
    merged (merged set to True, so that merge() itself is not tested here)."""
    layer = build(kernel, dropout=0.5, seed=24)
    x = randn(6, IN, seed=74)
    for mode in ("train mode, dropout 0.5", "eval mode", "merged, eval mode"):
        if mode == "eval mode":
            layer.lora.eval()
        elif mode.startswith("merged"):
            kernel.set_attribute(layer.lora, "merged", True)
        held = kernel.hold(x.clone(), "x")
        layer.lora.seeded(74)(held)
        checks.equal(kernel.attribute(held, "data"), x, f"x after {CLASS}(x), {mode}")


# --- from scratch ------------------------------------------------------------------------


@exercise.check("from scratch")
def no_lora_library(kernel):
    """The layer is the notebook's own: it holds no LoRA library's layer (peft, loralib,
    torchtune), the source names none, and nothing evades the watch."""
    layer = build(kernel, load=False)
    layer.lora(randn(2, IN, seed=81))
    require_no_builtin_module(kernel.modules(layer.lora), CLASS, exercise.watch)
    lib.no_builtin(kernel, exercise)
