"""Hidden suite for `norms`: RMSNorm and LayerNorm from scratch, as functions
(`rms_norm(x, weight, eps)`, `layer_norm(x, weight, bias, eps)`) and modules (`RMSNorm`,
`LayerNorm`), pinned to torch's F.rms_norm / F.layer_norm computed here in float64.

What makes the bugs show (EXERCISES_NEXT.md, sections 3.6 and 4.2): random weights and
biases (ones hide weight bugs), inputs with |x| ~ 1e-3 for the eps placement (invisible at
unit scale), float16 inputs near 1000 for the float32 upcast (x**2 overflows), bfloat16 with
a bias for LayerNorm's affine-before-cast, float64 rows near 1e6 for a one-pass variance
(and near 1e3 for a float32 mean), and rows of T = 3 tokens of d = 16 features (T != d, so a
mean without keepdim raises). A test about one thing leaves the others out of play: the
float64 tests that are not about eps use |x| >= 100 (x ~ 1e3 at rtol 1e-7), where eps =
1e-6 changes nothing, so an eps bug loses points at the eps level alone.
"""

import torch
from torch.nn import functional as F

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import (
    require_clean_source,
    require_no_builtin_module,
    require_nothing_seen,
)

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
D = 16  # features; leading shapes never have an axis of D, so broadcasting bugs raise

# torch's normalisation built-ins: the functions (torch.* and F.*), the aten ops behind
# them, and the module types (by their class names and by where they come from)
FUNCTIONS = (
    "rms_norm",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "native_group_norm",
    "instance_norm",
    "batch_norm",
    "native_batch_norm",
)
MODULES = ("RMSNorm", "LayerNorm", "GroupNorm", "LocalResponseNorm", "CrossMapLRN2d")
MODULES_FROM = "torch.nn.modules"
NORMS = Watch(
    what="normalization",
    functions=FUNCTIONS,
    ops=("layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm"),
    dispatch_pattern=r"layer_norm|rms_norm|group_norm|batch_norm|instance_norm",
    instrument=tuple(
        f"torch.nn.functional:{name}"
        for name in ("rms_norm", "layer_norm", "group_norm", "instance_norm", "batch_norm")
    )
    + ("torch.nn:RMSNorm.forward", "torch.nn:LayerNorm.forward"),
    modules=frozenset(
        {f"{MODULES_FROM}.normalization.{name}" for name in MODULES}
        | {f"{MODULES_FROM}.batchnorm._NormBase", f"{MODULES_FROM}.instancenorm._InstanceNorm"}
    ),
    private=r"layer_norm|rms_norm|group_norm|batch_norm|instance_norm",
)

exercise = Exercise(
    id="norms",
    tags=("normalization", "modules"),
    minutes=30,
    title="RMSNorm and LayerNorm, from scratch",
    seed="-",
    levels=[
        "shapes",
        "values",
        "eps placement",
        "dtypes",
        "gradients",
        "layer norm",
        "edge cases",
        "from scratch",
    ],
    defines=("rms_norm", "RMSNorm", "layer_norm", "LayerNorm"),
    forbidden=(
        *FUNCTIONS,
        *MODULES,
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "InstanceNorm1d",
        "InstanceNorm2d",
        "InstanceNorm3d",
        "SyncBatchNorm",
    ),
    watch=NORMS,
)


# -- inputs and references (the grader's torch, float64) -------------------------------


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F32) -> torch.Tensor:
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def ref_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm in float64 on exactly these (possibly rounded) inputs."""
    return F.rms_norm(x.double(), (x.shape[-1],), w.double(), eps)


def ref_ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, eps: float) -> torch.Tensor:
    """F.layer_norm in float64 on exactly these inputs."""
    bias = None if b is None else b.double()
    return F.layer_norm(x.double(), (x.shape[-1],), w.double(), bias, eps)


def result(value, x: torch.Tensor, what: str) -> torch.Tensor:
    """`value` is a tensor of x's shape and x's dtype."""
    y = checks.tensor(value, what, x.shape)
    if y.dtype != x.dtype:
        have, want = str(y.dtype).replace("torch.", ""), str(x.dtype).replace("torch.", "")
        raise checks.Failed(f"{what} has dtype {have}, want {want} (x's dtype)")
    return y


def matches(value, x: torch.Tensor, want: torch.Tensor, what: str, **tol: float) -> None:
    """`value` has x's shape and dtype and matches the float64 reference `want`."""
    checks.close(result(value, x, what), want, f"{what} vs torch", **tol)


def state_is(module, owner: str, want: dict[str, torch.Tensor]) -> None:
    """The module's state_dict holds exactly `want`'s names, with exactly those values."""
    state = lib.state_dict(module, owner)
    if set(state) != set(want):
        raise checks.Failed(
            f"{owner}.state_dict() holds {', '.join(sorted(map(str, state))) or 'nothing'}, "
            f"want exactly {', '.join(sorted(want))}"
        )
    for name, value in want.items():
        checks.equal(state[name], value, f"{owner}.{name} when constructed")


def state_is_now(module, owner: str, want: dict[str, torch.Tensor]) -> None:
    """The module's tensors named in `want` still hold exactly those values, dtype
    included."""
    state = lib.require_state(lib.state_dict(module, owner), list(want), owner)
    for name, value in want.items():
        got = checks.tensor(state[name], f"{owner}.{name}", value.shape)
        if got.dtype != value.dtype:
            raise checks.Failed(f"{owner}.{name} is now {str(got.dtype)[6:]}, want "
                                f"{str(value.dtype)[6:]} (its dtype before the calls)")  # fmt: skip
        checks.equal(got, value, f"{owner}.{name} after the calls")


def rms_module(kernel, w: torch.Tensor, *args, **kwargs):
    """RMSNorm(D, ...) in the kernel, cast to w's dtype, holding the weight `w`
    (load_state names a missing weight)."""
    module = kernel.new("RMSNorm", D, *args, **kwargs)
    if w.dtype != F32:
        module.to(w.dtype)
    lib.load_state(module, "RMSNorm", {"weight": w})
    return module


def ln_module(kernel, w: torch.Tensor, b: torch.Tensor | None, **kwargs):
    """LayerNorm(D, ...) in the kernel, cast to w's dtype, holding `w` (and `b`)."""
    module = kernel.new("LayerNorm", D, **kwargs)
    tensors = {"weight": w} if b is None else {"weight": w, "bias": b}
    if w.dtype != F32:
        module.to(w.dtype)
    lib.load_state(module, "LayerNorm", tensors)
    return module


def unchanged(kernel, name: str, inputs: dict[str, torch.Tensor], eps: float, call: str) -> None:
    """`name(*inputs, eps)` (the inputs held in the kernel, then read back) leaves every
    input as it was."""
    held = [kernel.hold(t.clone(), n) for n, t in inputs.items()]
    kernel.get(name)(*held, eps)
    for (n, t), h in zip(inputs.items(), held, strict=True):
        checks.equal(kernel.attribute(h, "data"), t, f"{n} after {call}")


def rms_rows(y: torch.Tensor, what: str) -> None:
    """With weight 1 every row of `y` has root-mean-square 1 (within 1e-4)."""
    rms = y.detach().double().pow(2).mean(dim=-1).sqrt().flatten()
    worst = float(rms[(rms - 1).abs().argmax()])
    if not abs(worst - 1) <= 1e-4:
        side = "above" if worst > 1 else "below"
        raise checks.Failed(f"{what}: a row's RMS is {worst:.4g} ({side} 1), want 1 (±1e-4)")


# -- shapes: the API ---------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def rms_norm_keeps_shape_and_dtype(kernel):
    """rms_norm(x, weight, eps) returns x's shape and dtype for 2-D, 3-D and 4-D float32 x."""
    xs = [randn(5, D, seed=1), randn(2, 3, D, seed=2), randn(2, 1, 3, D, seed=3)]
    w = randn(D, seed=4)
    outs = kernel.many(kernel.get("rms_norm"), [((x, w, 1e-6), {}) for x in xs])
    for x, y in zip(xs, outs, strict=True):
        result(y, x, f"rms_norm(x of shape {list(x.shape)})")


@exercise.check("shapes", hidden=False)
def rms_module_holds_a_weight_of_ones(kernel):
    """RMSNorm(16) holds exactly one tensor, weight [16], all ones, and keeps x's shape."""
    module = kernel.new("RMSNorm", D)
    x = randn(2, 3, D, seed=5)
    result(module(x), x, "RMSNorm(16)(x)")
    state_is(module, "RMSNorm(16)", {"weight": torch.ones(D)})


@exercise.check("shapes")
def layer_norm_keeps_shape_and_dtype(kernel):
    """layer_norm(x, weight, bias, eps) keeps x's shape and dtype, with a bias and with None."""
    x, w, b = randn(2, 3, D, seed=6), randn(D, seed=7), randn(D, seed=8)
    f = kernel.get("layer_norm")
    with_bias, without = kernel.many(f, [((x, w, b, 1e-5), {}), ((x, w, None, 1e-5), {})])
    result(with_bias, x, "layer_norm(x, weight, bias, 1e-5)")
    result(without, x, "layer_norm(x, weight, None, 1e-5)")


@exercise.check("shapes")
def layer_module_holds_weight_and_bias(kernel):
    """LayerNorm(16) holds weight (ones) and bias (zeros); LayerNorm(16, bias=False) no bias."""
    x = randn(2, 3, D, seed=9)
    module = kernel.new("LayerNorm", D)
    result(module(x), x, "LayerNorm(16)(x)")
    state_is(module, "LayerNorm(16)", {"weight": torch.ones(D), "bias": torch.zeros(D)})
    plain = kernel.new("LayerNorm", D, bias=False)
    result(plain(x), x, "LayerNorm(16, bias=False)(x)")
    state_is(plain, "LayerNorm(16, bias=False)", {"weight": torch.ones(D)})


# -- values: float32, unit scale, random weight ------------------------------------------


@exercise.check("values", points=2, hidden=False)
def rms_norm_matches_torch(kernel):
    """rms_norm(x, weight, 1e-6) in float32 (unit-scale x, random weight) matches F.rms_norm."""
    x, w = randn(2, 3, D, seed=11), randn(D, seed=12)
    matches(kernel.get("rms_norm")(x, w, 1e-6), x, ref_rms(x, w, 1e-6), "rms_norm(x, w, 1e-6)")


@exercise.check("values", points=2)
def rms_module_matches_torch(kernel):
    """RMSNorm(16) holding a random weight matches F.rms_norm (float32, x ~ 3)."""
    x, w = randn(4, 3, D, seed=13, scale=3.0), randn(D, seed=14)
    matches(rms_module(kernel, w)(x), x, ref_rms(x, w, 1e-6), "RMSNorm(16)(x)")


@exercise.check("values")
def unit_weight_gives_unit_rms(kernel):
    """With weight = 1 every output row has root-mean-square 1 (a reference-free property)."""
    x = randn(4, 3, D, seed=15, scale=2.0)
    y = result(kernel.get("rms_norm")(x, torch.ones(D), 1e-6), x, "rms_norm(x, ones, 1e-6)")
    rms_rows(y, "rms_norm(x, ones, 1e-6)")


@exercise.check("values")
def weight_multiplies_each_feature(kernel):
    """rms_norm(x, w) = w * rms_norm(x, ones): the weight scales the normalised features."""
    x, w = randn(3, 2, D, seed=16), randn(D, seed=17)
    f = kernel.get("rms_norm")
    scaled, plain = kernel.many(f, [((x, w, 1e-6), {}), ((x, torch.ones(D), 1e-6), {})])
    result(plain, x, "rms_norm(x, ones, 1e-6)")
    checks.same(
        result(scaled, x, "rms_norm(x, w)"), w * plain, "rms_norm(x, w) vs w * rms_norm(x, ones)"
    )


@exercise.check("values")
def scaling_x_changes_nothing(kernel):
    """rms_norm(3x) = rms_norm(x) for unit-scale x: the output does not depend on x's scale."""
    x, w = randn(3, 2, D, seed=18), randn(D, seed=19)
    f = kernel.get("rms_norm")
    big, plain = kernel.many(f, [((3 * x, w, 1e-6), {}), ((x, w, 1e-6), {})])
    result(plain, x, "rms_norm(x, w)")
    checks.same(result(big, x, "rms_norm(3x, w)"), plain, "rms_norm(3x, w) vs rms_norm(x, w)")


@exercise.check("values")
def rms_norm_keeps_the_mean(kernel):
    """Unlike LayerNorm, RMSNorm does not subtract the row mean: rms_norm(x + 1.5) differs."""
    x, w = randn(3, 2, D, seed=20), randn(D, seed=21)
    f = kernel.get("rms_norm")
    shifted, plain = kernel.many(f, [((x + 1.5, w, 1e-6), {}), ((x, w, 1e-6), {})])
    checks.differ(
        result(shifted, x, "rms_norm(x + 1.5, w)"),
        result(plain, x, "rms_norm(x, w)"),
        "rms_norm(x + 1.5, w) vs rms_norm(x, w) (RMSNorm must not subtract the row mean)",
    )


@exercise.check("values")
def input_is_left_unchanged(kernel):
    """rms_norm does not modify x or weight in place."""
    x, w = randn(2, 3, D, seed=22), randn(D, seed=23)
    unchanged(kernel, "rms_norm", {"x": x, "weight": w}, 1e-6, "rms_norm(x, w, 1e-6)")


# -- eps placement: small-variance inputs, large eps ---------------------------------------


@exercise.check("eps placement", points=2, hidden=False)
def small_inputs_put_eps_inside_the_root(kernel):
    """x ~ 1e-3, so mean(x**2) ~ eps = 1e-6: rms_norm matches F.rms_norm (eps inside the root)."""
    x, w = randn(4, 3, D, seed=31, scale=1e-3), randn(D, seed=32)
    matches(
        kernel.get("rms_norm")(x, w, 1e-6), x, ref_rms(x, w, 1e-6), "rms_norm(x ~ 1e-3, w, 1e-6)"
    )


@exercise.check("eps placement")
def large_eps(kernel):
    """eps = 0.1 with unit-scale x (ARENA's test): the eps given is the one used."""
    x, w = randn(4, 3, D, seed=33), randn(D, seed=34)
    matches(kernel.get("rms_norm")(x, w, 0.1), x, ref_rms(x, w, 0.1), "rms_norm(x, w, eps=0.1)")


@exercise.check("eps placement")
def rms_module_uses_its_eps(kernel):
    """RMSNorm(16, eps=0.1) matches F.rms_norm with eps 0.1."""
    x, w = randn(4, 3, D, seed=35), randn(D, seed=36)
    module = rms_module(kernel, w, eps=0.1)
    matches(module(x), x, ref_rms(x, w, 0.1), "RMSNorm(16, eps=0.1)(x)")


@exercise.check("eps placement")
def zero_eps_is_honoured(kernel):
    """eps = 0.0 (falsy) is the eps used, not taken for a default: rms_norm and
    RMSNorm(16, eps=0.0) on x ~ 1e-3 match F.rms_norm with eps 0."""
    x, w = randn(4, 3, D, seed=39, scale=1e-3), randn(D, seed=40)
    want = ref_rms(x, w, 0.0)
    matches(kernel.get("rms_norm")(x, w, 0.0), x, want, "rms_norm(x ~ 1e-3, w, eps=0.0)")
    matches(rms_module(kernel, w, eps=0.0)(x), x, want, "RMSNorm(16, eps=0.0)(x ~ 1e-3)")


@exercise.check("eps placement")
def rms_module_default_eps(kernel):
    """RMSNorm(16) uses eps = 1e-6 by default (checked on x ~ 1e-3)."""
    x, w = randn(4, 3, D, seed=37, scale=1e-3), randn(D, seed=38)
    matches(rms_module(kernel, w)(x), x, ref_rms(x, w, 1e-6), "RMSNorm(16)(x ~ 1e-3)")


# -- dtypes: float32 compute for half inputs, float64 kept -----------------------------------


@exercise.check("dtypes", points=2, hidden=False)
def float16_is_computed_in_float32(kernel):
    """float16 x with |x| ~ 1000 (x**2 overflows float16), float16 weight: float16 output."""
    x, w = randn(4, 3, D, seed=41, scale=1000.0, dtype=F16), randn(D, seed=42, dtype=F16)
    matches(kernel.get("rms_norm")(x, w, 1e-6), x, ref_rms(x, w, 1e-6), "rms_norm(float16 x, w)")


@exercise.check("dtypes")
def bfloat16_input(kernel):
    """bfloat16 x and weight: a bfloat16 output matching F.rms_norm."""
    x, w = randn(4, 3, D, seed=43, scale=3.0, dtype=BF16), randn(D, seed=44, dtype=BF16)
    matches(kernel.get("rms_norm")(x, w, 1e-6), x, ref_rms(x, w, 1e-6), "rms_norm(bfloat16 x, w)")


@exercise.check("dtypes")
def float32_module_with_bfloat16_input(kernel):
    """RMSNorm(16) with a float32 weight, given bfloat16 x, returns bfloat16 (x's dtype)."""
    x, w = randn(4, 3, D, seed=45, dtype=BF16), randn(D, seed=46)
    matches(rms_module(kernel, w)(x), x, ref_rms(x, w, 1e-6), "RMSNorm(16)(bfloat16 x)")


@exercise.check("dtypes")
def float64_stays_float64(kernel):
    """float64 x stays float64: x ~ 1e30 (x**2 overflows float32), and x ~ 1e3 at rtol 1e-7
    (float32 rounding shows; eps = 1e-6 is negligible next to mean(x**2) ~ 1e6)."""
    w = randn(D, seed=48, dtype=F64)
    xs = [randn(4, 3, D, seed=47, scale=1e30, dtype=F64),
          randn(8, 8, D, seed=49, scale=1e3, dtype=F64)]  # fmt: skip
    outs = kernel.many(kernel.get("rms_norm"), [((x, w, 1e-6), {}) for x in xs])
    for x, y, what in zip(xs, outs, ("x ~ 1e30", "x ~ 1e3"), strict=True):
        matches(y, x, ref_rms(x, w, 1e-6), f"rms_norm(float64 {what}, w)")


# -- gradients: float64, against torch's autograd -------------------------------------------


@exercise.check("gradients", points=2)
def rms_norm_gradients(kernel):
    """Gradients of rms_norm w.r.t. x and weight match F.rms_norm's autograd (float64, x ~ 100,
    where eps = 1e-6 plays no part)."""
    x, w = randn(3, 2, D, seed=51, scale=100.0, dtype=F64), randn(D, seed=52, dtype=F64)
    lib.gradients_match(
        kernel, kernel.get("rms_norm"), (x, w, 1e-6),
        lambda x, w, eps: F.rms_norm(x, (D,), w, eps), wrt=[0, 1], what="rms_norm",
        names=["x", "weight"],
    )  # fmt: skip


def module_gradients(kernel, module, owner: str, x, reference, leaves: dict) -> None:
    """Backprop sum(module(x) * r): x's gradient and each parameter's in `leaves` match the
    float64 `reference` (a function of x and the leaves, run here with autograd)."""
    xr = x.clone().requires_grad_(True)
    grads_for = {n: t.clone().requires_grad_(True) for n, t in leaves.items()}
    y = reference(xr, **grads_for)
    r = randn(*y.shape, seed=59, dtype=F64)
    (y * r).sum().backward()
    got = kernel.grad(module, (x,), {}, wrt=[0], cotangent=r)
    gx = checks.tensor(got["inputs"][0], f"gradient of {owner}(x) w.r.t. x", x.shape)
    checks.close(gx, xr.grad, f"gradient of {owner}(x) w.r.t. x vs autograd")
    params = got["params"]
    for name, leaf in grads_for.items():
        if name not in params:
            found = ", ".join(sorted(params)) or "none"
            raise checks.Failed(
                f"{owner}.{name} is not an nn.Parameter (parameters: {found}), want one"
            )
        if params[name] is None:
            raise checks.Failed(f"no gradient reached {owner}.{name}, want one (detached?)")
        g = checks.tensor(params[name], f"gradient of {owner}.{name}", leaf.shape)
        checks.close(g, leaf.grad, f"gradient of {owner}.{name} vs autograd")


@exercise.check("gradients", points=2)
def rms_module_gradients(kernel):
    """Backprop through RMSNorm(16) (float64, x ~ 100) reaches x and the weight parameter, as
    torch's."""
    x, w = randn(3, 2, D, seed=53, scale=100.0, dtype=F64), randn(D, seed=54, dtype=F64)
    module = rms_module(kernel, w)
    module_gradients(
        kernel, module, "RMSNorm", x, lambda x, weight: F.rms_norm(x, (D,), weight, 1e-6),
        {"weight": w},
    )  # fmt: skip


# -- layer norm --------------------------------------------------------------------------


@exercise.check("layer norm", points=2, hidden=False)
def layer_norm_matches_torch(kernel):
    """layer_norm(x, weight, bias, 1e-5) in float32 matches F.layer_norm (biased variance)."""
    x, w, b = randn(2, 3, D, seed=61), randn(D, seed=62), randn(D, seed=63)
    got = kernel.get("layer_norm")(x, w, b, 1e-5)
    matches(got, x, ref_ln(x, w, b, 1e-5), "layer_norm(x, w, b, 1e-5)")


@exercise.check("layer norm")
def layer_norm_without_bias(kernel):
    """layer_norm(x, weight, None, 1e-5) matches F.layer_norm without a bias."""
    x, w = randn(2, 3, D, seed=64), randn(D, seed=65)
    got = kernel.get("layer_norm")(x, w, None, 1e-5)
    matches(got, x, ref_ln(x, w, None, 1e-5), "layer_norm(x, w, None, 1e-5)")


@exercise.check("layer norm")
def layer_norm_rows_have_mean_0_and_variance_1(kernel):
    """With weight 1 and no bias each row has mean 0 and biased variance 1 (reference-free)."""
    x = randn(4, 3, D, seed=66, scale=2.0)
    y = result(kernel.get("layer_norm")(x, torch.ones(D), None, 1e-5), x, "layer_norm(x, 1)")
    mean = y.double().mean(dim=-1)
    if float(mean.abs().max()) > 1e-5:
        raise checks.Failed(
            f"layer_norm(x, 1): a row's mean is {float(mean.abs().max()):.3g}, want 0"
        )
    variance = (y.double() - mean[..., None]).pow(2).mean(dim=-1).flatten()
    worst = float(variance[(variance - 1).abs().argmax()])
    if not abs(worst - 1) <= 1e-4:
        side = "above" if worst > 1 else "below"
        raise checks.Failed(
            f"layer_norm(x, 1): a row's variance (over d) is {worst:.4g} ({side} 1), want 1"
        )


@exercise.check("layer norm")
def layer_module_matches_torch(kernel):
    """LayerNorm(16) with a random weight and bias, and LayerNorm(16, bias=False), match torch."""
    x, w, b = randn(4, 3, D, seed=67), randn(D, seed=68), randn(D, seed=69)
    matches(ln_module(kernel, w, b)(x), x, ref_ln(x, w, b, 1e-5), "LayerNorm(16)(x)")
    plain = ln_module(kernel, w, None, bias=False)
    matches(plain(x), x, ref_ln(x, w, None, 1e-5), "LayerNorm(16, bias=False)(x)")


@exercise.check("layer norm")
def layer_norm_small_variance(kernel):
    """x ~ 1e-3 (variance ~ 1e-6 < eps = 1e-5): eps inside the root, as F.layer_norm."""
    x, w, b = randn(4, 3, D, seed=70, scale=1e-3), randn(D, seed=71), randn(D, seed=72)
    got = kernel.get("layer_norm")(x, w, b, 1e-5)
    matches(got, x, ref_ln(x, w, b, 1e-5), "layer_norm(x ~ 1e-3, w, b, 1e-5)")


@exercise.check("layer norm")
def layer_module_uses_its_eps(kernel):
    """LayerNorm(16, eps=0.1) matches F.layer_norm with eps 0.1, and LayerNorm(16, eps=0.0)
    (falsy, not taken for the default) with eps 0 on x ~ 1e-3."""
    x, w, b = randn(4, 3, D, seed=73), randn(D, seed=74), randn(D, seed=75)
    module = ln_module(kernel, w, b, eps=0.1)
    matches(module(x), x, ref_ln(x, w, b, 0.1), "LayerNorm(16, eps=0.1)(x)")
    small = randn(4, 3, D, seed=78, scale=1e-3)
    module = ln_module(kernel, w, b, eps=0.0)
    matches(module(small), small, ref_ln(small, w, b, 0.0), "LayerNorm(16, eps=0.0)(x ~ 1e-3)")


@exercise.check("layer norm")
def layer_norm_leaves_inputs_unchanged(kernel):
    """layer_norm does not modify x, weight or bias in place."""
    x, w, b = randn(2, 3, D, seed=87), randn(D, seed=88), randn(D, seed=89)
    unchanged(kernel, "layer_norm", {"x": x, "weight": w, "bias": b}, 1e-5,
              "layer_norm(x, weight, bias, 1e-5)")  # fmt: skip


@exercise.check("layer norm")
def layer_norm_bfloat16(kernel):
    """bfloat16 x, weight and bias: weight and bias applied in float32, then cast to bfloat16."""
    x = randn(4, 5, D, seed=0, scale=3.0, dtype=BF16)
    w, b = randn(D, seed=10, dtype=BF16), randn(D, seed=20, dtype=BF16)
    got = kernel.get("layer_norm")(x, w, b, 1e-5)
    matches(got, x, ref_ln(x, w, b, 1e-5), "layer_norm(bfloat16 x, w, b)")


@exercise.check("layer norm")
def layer_norm_float16_large(kernel):
    """float16 x ~ 1000 (squares overflow float16), no bias: computed in float32."""
    x, w = randn(4, 5, D, seed=76, scale=1000.0, dtype=F16), randn(D, seed=77, dtype=F16)
    got = kernel.get("layer_norm")(x, w, None, 1e-5)
    matches(got, x, ref_ln(x, w, None, 1e-5), "layer_norm(float16 x, w, None)")


@exercise.check("layer norm", points=2)
def layer_norm_gradients(kernel):
    """Gradients of layer_norm w.r.t. x, weight and bias match F.layer_norm's (float64)."""
    x, w, b = (randn(*s, seed=79 + i, dtype=F64) for i, s in enumerate([(3, 2, D), (D,), (D,)]))
    lib.gradients_match(
        kernel, kernel.get("layer_norm"), (x, w, b, 1e-5),
        lambda x, w, b, eps: F.layer_norm(x, (D,), w, b, eps), wrt=[0, 1, 2], what="layer_norm",
        names=["x", "weight", "bias"],
    )  # fmt: skip


@exercise.check("layer norm")
def layer_module_gradients(kernel):
    """Backprop through LayerNorm(16) (float64) reaches x, weight and bias, as torch's."""
    x, w, b = (randn(*s, seed=82 + i, dtype=F64) for i, s in enumerate([(3, 2, D), (D,), (D,)]))
    module = ln_module(kernel, w, b)
    module_gradients(
        kernel, module, "LayerNorm", x,
        lambda x, weight, bias: F.layer_norm(x, (D,), weight, bias, 1e-5),
        {"weight": w, "bias": b},
    )  # fmt: skip


# -- edge cases ----------------------------------------------------------------------------


@exercise.check("edge cases")
def zero_and_constant_rows(kernel):
    """rms_norm maps a zero row to exactly 0; layer_norm maps a constant row to the bias."""
    x, w, b = randn(4, D, seed=91), randn(D, seed=92), randn(D, seed=93)
    x[1] = 0.0
    got = result(kernel.get("rms_norm")(x, w, 1e-6), x, "rms_norm(x with a zero row)")
    checks.finite(got, "rms_norm(x with a zero row)")
    lib.exactly_zero(got[1], "rms_norm(x) on the all-zero row")
    matches(got, x, ref_rms(x, w, 1e-6), "rms_norm(x with a zero row)")
    x[2] = 5.0
    got = kernel.get("layer_norm")(x, w, b, 1e-5)
    matches(got, x, ref_ln(x, w, b, 1e-5), "layer_norm(x with constant rows)")


@exercise.check("edge cases")
def a_single_vector(kernel):
    """x of shape [16] (no leading axis): rms_norm and layer_norm return shape [16]."""
    x, w, b = randn(D, seed=94), randn(D, seed=95), randn(D, seed=96)
    matches(kernel.get("rms_norm")(x, w, 1e-6), x, ref_rms(x, w, 1e-6), "rms_norm(x of shape [16])")
    got = kernel.get("layer_norm")(x, w, b, 1e-5)
    matches(got, x, ref_ln(x, w, b, 1e-5), "layer_norm(x of shape [16])")


@exercise.check("edge cases")
def batch_of_one(kernel):
    """x of shape [1, 1, 16] through RMSNorm and LayerNorm: each row normalised on its own."""
    x, w, b = randn(1, 1, D, seed=97, scale=10.0), randn(D, seed=98), randn(D, seed=99)
    matches(rms_module(kernel, w)(x), x, ref_rms(x, w, 1e-6), "RMSNorm(16)(x of shape [1, 1, 16])")
    got = ln_module(kernel, w, b)(x)
    matches(got, x, ref_ln(x, w, b, 1e-5), "LayerNorm(16)(x of shape [1, 1, 16])")


@exercise.check("edge cases")
def non_contiguous_input(kernel):
    """A non-contiguous x (column-major, strided features: no .view(-1, d) possible) is handled."""
    x = lib.noncontiguous(randn(2, 3, D, seed=100))
    w, b = randn(D, seed=101), randn(D, seed=102)
    got = kernel.get("rms_norm")(x, w, 1e-6)
    matches(got, x, ref_rms(x, w, 1e-6), "rms_norm(non-contiguous x)")
    got = kernel.get("layer_norm")(x, w, b, 1e-5)
    matches(got, x, ref_ln(x, w, b, 1e-5), "layer_norm(non-contiguous x)")


@exercise.check("edge cases")
def large_magnitudes(kernel):
    """rms_norm on float32 x ~ 1e4; layer_norm on float64 rows near 1e3 and near 1e6 (float64
    precision kept, no cancellation)."""
    x, w = randn(4, 3, D, seed=103, scale=1e4), randn(D, seed=104)
    matches(kernel.get("rms_norm")(x, w, 1e-6), x, ref_rms(x, w, 1e-6), "rms_norm(x ~ 1e4)")
    w, b = randn(D, seed=106, dtype=F64), randn(D, seed=107, dtype=F64)
    for offset, near in ((1e3, "a thousand"), (1e6, "a million")):
        x = randn(4, 3, D, seed=105, dtype=F64) + offset
        got = kernel.get("layer_norm")(x, w, b, 1e-5)
        matches(got, x, ref_ln(x, w, b, 1e-5), f"layer_norm(float64 rows near {near})")


@exercise.check("edge cases")
def modules_called_twice(kernel):
    """A float32 RMSNorm and LayerNorm called on bfloat16 x, then on float32 x: the second
    call matches torch's, and neither module's weights changed (no state kept across calls)."""
    x16 = randn(2, 3, D, seed=108, scale=10.0, dtype=BF16)
    x = randn(2, 3, D, seed=109, scale=10.0)
    w, b = randn(D, seed=110), randn(D, seed=111)
    rms, ln = rms_module(kernel, w), ln_module(kernel, w, b)
    rms(x16), ln(x16)
    matches(rms(x), x, ref_rms(x, w, 1e-6), "RMSNorm(16)(x), after a bfloat16 call,")
    matches(ln(x), x, ref_ln(x, w, b, 1e-5), "LayerNorm(16)(x), after a bfloat16 call,")
    state_is_now(rms, "RMSNorm(16)", {"weight": w})
    state_is_now(ln, "LayerNorm(16)", {"weight": w, "bias": b})


# -- from scratch --------------------------------------------------------------------------


def exercise_everything(kernel) -> list:
    """Run both functions and both modules (forward) once; returns the modules."""
    x, w, b = randn(2, 3, D, seed=111), randn(D, seed=112), randn(D, seed=113)
    kernel.get("rms_norm")(x, w, 1e-6)
    kernel.get("layer_norm")(x, w, b, 1e-5)
    modules = [kernel.new("RMSNorm", D), kernel.new("LayerNorm", D)]
    for module in modules:
        module(x)
    return modules


@exercise.check("from scratch", points=2)
def no_builtin_norm_in_source(kernel):
    """The code names none of torch's norm built-ins (its own rms_norm, layer_norm are fine)."""
    kernel.get("rms_norm")(randn(2, D, seed=114), torch.ones(D), 1e-6)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch", points=2)
def no_builtin_norm_at_run_time(kernel):
    """No normalisation built-in ran during the hidden tests, and neither module holds one."""
    modules = exercise_everything(kernel)
    for module, owner in zip(modules, ("RMSNorm", "LayerNorm"), strict=True):
        require_no_builtin_module(kernel.modules(module), owner, exercise.watch)
    require_nothing_seen(kernel.seen)
