"""Hidden suite for `conv2d`: a 2-D convolution (cross-correlation) from scratch with
stride, padding, dilation, groups and bias, pinned to torch's F.conv2d computed here in
float64 on the same inputs.

What makes the bugs show (EXERCISES_CANON.md, section 8): non-square everything (H = 9,
W = 11, a 3 x 2 kernel, C_in = 6 != C_out = 12), so a swapped axis raises or moves values;
random kernels (a symmetric one hides a flip); pairs whose two values differ; a stride that
does not divide the padded extent (floor vs ceil); a depthwise convolution with two output
channels per input channel (an interleaved group layout shows). One feature per check:
every other argument at its default, so a bug loses points at its own level. Inputs are
float64, compared at float64's default tolerance, except one float32 check (rtol 1e-5,
atol 1e-4: a float32 sum of many products is that far from float64, torch's own included).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_clean_source, require_nothing_seen

FUNCTION = "conv2d"
F32, F64 = lib.F32, lib.F64

# torch's convolutions: every public name (functions and modules), the aten ops behind them
# (the conv family, its backends, and im2col/col2im behind F.unfold/F.fold)
CONVS = tuple(f"conv{d}d" for d in (1, 2, 3)) + tuple(f"conv_transpose{d}d" for d in (1, 2, 3))
MODULES = tuple(f"Conv{d}d" for d in (1, 2, 3)) + tuple(f"ConvTranspose{d}d" for d in (1, 2, 3))
# aten: convolution (and _convolution, mkldnn_/cudnn_/miopen_convolution, their backwards),
# conv1d/2d/3d, conv_transpose*, conv_tbc, _conv_depthwise2d, slow_conv*, thnn_conv2d,
# im2col/col2im (not _convert_weight_to_int4pack, which only shares a prefix)
OPS = r"conv(?!ert)|im2col|col2im"
WATCH = Watch(
    what="convolution",
    functions=(*CONVS, "convolution", "_convolution", "conv_tbc"),
    ops=(
        "convolution",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose",
        "conv_tbc",
        "conv_depthwise",
        "slow_conv",
        "thnn_conv",
        "im2col",
        "col2im",
    ),  # fmt: skip
    dispatch_pattern=OPS,
    instrument=("torch.nn.functional:unfold", "torch.nn.functional:fold"),
    private=OPS,
)

exercise = Exercise(
    id="conv2d",
    tags=("convolution", "vision"),
    minutes=35,
    title="2-D convolution (stride, padding, dilation, groups, bias), from scratch",
    seed="-",
    levels=[
        "shapes",
        "values",
        "padding",
        "stride and dilation",
        "groups",
        "gradients",
        "robustness",
        "from scratch",
    ],
    defines=(FUNCTION,),
    forbidden=(
        *CONVS,
        *MODULES,
        "convolution",
        "_convolution",
        "conv_tbc",
        "LazyConv1d",
        "LazyConv2d",
        "LazyConv3d",
        "Unfold",
        "Fold",
        "fold",
        "im2col",
        "col2im",
    ),
    watch=WATCH,  # set by the lead from the independent solution's time
)


# -- inputs and the reference (the grader's torch, float64) -----------------------------


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F64) -> torch.Tensor:
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def problem(c_in: int = 6, c_out: int = 12, size=(9, 11), kernel=(3, 2), groups: int = 1,
            n: int = 2, seed: int = 0, dtype: torch.dtype = F64):  # fmt: skip
    """Seeded x (n, c_in, *size) and weight (c_out, c_in // groups, *kernel)."""
    x = randn(n, c_in, *size, seed=seed, dtype=dtype)
    w = randn(c_out, c_in // groups, *kernel, seed=seed + 1, dtype=dtype)
    return x, w


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, **options):
    """F.conv2d in float64 on exactly these inputs."""
    bias = None if b is None else b.double()
    return F.conv2d(x.double(), w.double(), bias, **options)


def described(options: dict[str, Any], bias: bool = False) -> str:
    """`conv2d(x, weight, ...)` with the arguments given."""
    given = ", bias" if bias else ""
    return f"{FUNCTION}(x, weight{given}{''.join(f', {k}={v!r}' for k, v in options.items())})"


def result(value: Any, want: torch.Tensor, dtype: torch.dtype, what: str) -> torch.Tensor:
    """`value` is a tensor of the reference's shape, in x's dtype."""
    y = checks.tensor(value, what, want.shape)
    if y.dtype != dtype:
        have, expected = str(y.dtype)[6:], str(dtype)[6:]
        raise checks.Failed(f"{what} has dtype {have}, want {expected} (x's dtype)")
    return y


def matches(kernel, x, w, b=None, *, note: str = "", tol: dict | None = None, **options) -> None:
    """conv2d(x, w[, b], **options) has F.conv2d's shape, x's dtype and its values."""
    args = (x, w) if b is None else (x, w, b)
    what = described(options, b is not None) + (f" {note}" if note else "")
    want = reference(x, w, b, **options)
    got = result(kernel.get(FUNCTION)(*args, **options), want, x.dtype, what)
    checks.close(got, want, f"{what} vs F.conv2d", **(tol or {}))


# -- shapes --------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def output_shape_and_dtype(kernel):
    """conv2d(x (2, 6, 9, 11), weight (12, 6, 3, 2)) has shape (2, 12, 7, 10) and x's dtype
    (float64)."""
    x, w = problem()
    got = kernel.get(FUNCTION)(x, w)
    result(got, torch.empty(2, 12, 7, 10), F64, described({}))


@exercise.check("shapes")
def float32_stays_float32(kernel):
    """A float32 x and weight give a float32 output of shape (2, 12, 7, 10)."""
    x, w = problem(seed=2, dtype=F32)
    got = kernel.get(FUNCTION)(x, w)
    result(got, torch.empty(2, 12, 7, 10), F32, f"{described({})} for float32 inputs")


# -- values: stride 1, no padding ----------------------------------------------------------


@exercise.check("values", points=2, hidden=False)
def matches_torch(kernel):
    """conv2d(x, weight) matches F.conv2d (float64, random 3 x 2 kernels, C_in 6, C_out 12)."""
    x, w = problem(seed=4)
    matches(kernel, x, w)


@exercise.check("values")
def with_bias(kernel):
    """conv2d(x, weight, bias) adds bias[o] to every position of output channel o."""
    x, w = problem(seed=6)
    matches(kernel, x, w, randn(12, seed=8))


@exercise.check("values")
def no_kernel_flip(kernel):
    """One input channel holding a single 1 (a delta): the output is the kernel itself,
    unflipped, placed as cross-correlation places it (F.conv2d)."""
    x = torch.zeros(1, 1, 6, 7, dtype=F64)
    x[0, 0, 3, 4] = 1.0
    w = randn(2, 1, 3, 2, seed=9)
    matches(kernel, x, w, note="on a delta input")


@exercise.check("values")
def inputs_left_unchanged(kernel):
    """x, weight and bias keep their values and shapes (no in-place operation on them)."""
    x, w = problem(seed=64)
    b = randn(12, seed=65)
    held = [kernel.hold(t.clone(), name) for name, t in (("x", x), ("weight", w), ("bias", b))]
    kernel.get(FUNCTION)(*held)
    for name, t, h in zip(("x", "weight", "bias"), (x, w, b), held, strict=True):
        checks.equal(kernel.attribute(h, "data"), t, f"{name} after conv2d(x, weight, bias)")


# -- padding -------------------------------------------------------------------------------


@exercise.check("padding", points=2)
def int_padding(kernel):
    """padding=1 pads one row and one column of zeros on every side."""
    x, w = problem(seed=10)
    matches(kernel, x, w, padding=1)


@exercise.check("padding")
def pair_padding(kernel):
    """padding=(2, 1): two rows above and below, one column left and right."""
    x, w = problem(seed=12)
    matches(kernel, x, w, padding=(2, 1))


@exercise.check("padding")
def padding_zero_on_one_axis(kernel):
    """padding=(0, 2) and (2, 0): a 0 (falsy) on one axis, padding on the other."""
    x, w = problem(seed=14)
    matches(kernel, x, w, padding=(0, 2))
    matches(kernel, x, w, padding=(2, 0))


@exercise.check("padding")
def padding_wider_than_the_kernel(kernel):
    """padding=3 with a 3 x 2 kernel: the border outputs see only zeros (0 without a bias)."""
    x, w = problem(seed=16, size=(4, 5))
    matches(kernel, x, w, padding=3)


# -- stride and dilation ---------------------------------------------------------------------


@exercise.check("stride and dilation", points=2)
def int_stride(kernel):
    """stride=2 on a 9 x 11 input with a 3 x 2 kernel: output 4 x 5."""
    x, w = problem(seed=20)
    matches(kernel, x, w, stride=2)


@exercise.check("stride and dilation")
def stride_that_does_not_divide(kernel):
    """stride=(4, 3) on a 10 x 12 input with a 3 x 2 kernel: floor gives 2 x 4 (the last
    windows that do not fit are dropped; ceil would give 3 x 5)."""
    x, w = problem(seed=22, size=(10, 12))
    matches(kernel, x, w, stride=(4, 3))


@exercise.check("stride and dilation", points=2)
def dilation(kernel):
    """dilation=(2, 3): kernel taps 2 rows and 3 columns apart (output 5 x 8)."""
    x, w = problem(seed=24)
    matches(kernel, x, w, dilation=(2, 3))


@exercise.check("stride and dilation")
def int_dilation(kernel):
    """dilation=2 on a 3 x 3 kernel: taps two apart on both axes (output 5 x 7)."""
    x, w = problem(seed=26, kernel=(3, 3))
    matches(kernel, x, w, dilation=2)


# -- groups --------------------------------------------------------------------------------


@exercise.check("groups", points=2)
def three_groups(kernel):
    """groups=3 (C_in 6, C_out 12, weight (12, 2, 3, 2)) matches F.conv2d."""
    x, w = problem(seed=30, groups=3)
    matches(kernel, x, w, groups=3)


@exercise.check("groups")
def depthwise(kernel):
    """groups=6=C_in with C_out=12: each input channel feeds two consecutive output
    channels (weight (12, 1, 3, 2))."""
    x, w = problem(seed=32, groups=6)
    matches(kernel, x, w, groups=6)


@exercise.check("groups")
def group_blocks_are_contiguous(kernel):
    """groups=3 with x zero outside input channels 2-3 (group 1): only output channels
    4-7 (group 1) are non-zero, and they match F.conv2d."""
    x, w = problem(seed=34, groups=3)
    x[:, :2], x[:, 4:] = 0.0, 0.0
    want = reference(x, w, groups=3)
    what = described({"groups": 3}) + " with x non-zero only in group 1"
    got = result(kernel.get(FUNCTION)(x, w, groups=3), want, F64, what)
    outside = torch.ones_like(want, dtype=torch.bool)
    outside[:, 4:8] = False
    leaked = float(got.masked_fill(~outside, 0).abs().max())
    if leaked != 0:
        raise checks.Failed(
            f"{what}: output channels outside 4-7 reach {leaked:.3g}, want 0 (groups are "
            "contiguous blocks of channels)"
        )
    checks.close(got, want, f"{what} vs F.conv2d")


# -- gradients (float64, autograd through the candidate's code) ------------------------------


def gradient(kernel, index: int, name: str, bias: bool = False) -> None:
    """The gradient of conv2d(x, weight[, bias]) w.r.t. argument `index` matches
    F.conv2d's (float64)."""
    x, w = problem(seed=40 + index, size=(6, 7))
    args = (x, w, randn(12, seed=45)) if bias else (x, w)
    lib.gradients_match(
        kernel, kernel.get(FUNCTION), args, lambda *a: F.conv2d(*a), wrt=[index],
        what=described({}, bias), names=[name],
    )  # fmt: skip


@exercise.check("gradients", points=2)
def gradient_wrt_x(kernel):
    """The gradient of conv2d(x, weight) w.r.t. x matches F.conv2d's (float64)."""
    gradient(kernel, 0, "x")


@exercise.check("gradients")
def gradient_wrt_weight(kernel):
    """The gradient of conv2d(x, weight) w.r.t. weight matches F.conv2d's (float64)."""
    gradient(kernel, 1, "weight")


@exercise.check("gradients")
def gradient_wrt_bias(kernel):
    """The gradient of conv2d(x, weight, bias) w.r.t. bias matches F.conv2d's (float64)."""
    gradient(kernel, 2, "bias", bias=True)


# -- robustness ------------------------------------------------------------------------------


@exercise.check("robustness")
def non_contiguous_inputs(kernel):
    """A non-contiguous x and weight (column-major, strided last axis: no .view that merges
    axes works on them) give the same values."""
    x, w = problem(seed=50)
    matches(kernel, lib.noncontiguous(x), lib.noncontiguous(w), note="(non-contiguous x, weight)")


@exercise.check("robustness")
def channels_last_input(kernel):
    """x in channels-last memory format gives the same values."""
    x, w = problem(seed=52)
    matches(kernel, x.to(memory_format=torch.channels_last), w, note="(channels-last x)")


@exercise.check("robustness")
def batch_of_one(kernel):
    """N = 1."""
    x, w = problem(seed=54, n=1)
    matches(kernel, x, w, note="(N = 1)")


@exercise.check("robustness")
def one_by_one_kernel(kernel):
    """A 1 x 1 kernel (a per-pixel linear map of the channels)."""
    x, w = problem(seed=56, kernel=(1, 1))
    matches(kernel, x, w, note="(1 x 1 kernel)")


@exercise.check("robustness")
def kernel_covers_the_input(kernel):
    """A 9 x 11 kernel on a 9 x 11 input: a 1 x 1 output."""
    x, w = problem(seed=58, kernel=(9, 11))
    matches(kernel, x, w, note="(kernel the size of x)")


@exercise.check("robustness")
def float32_inputs(kernel):
    """float32 x and weight: within rtol 1e-5, atol 1e-4 of the float64 answer."""
    x, w = problem(seed=60, dtype=F32)
    matches(kernel, x, w, note="(float32)", tol={"rtol": 1e-5, "atol": 1e-4})


@exercise.check("robustness")
def float64_large_magnitudes(kernel):
    """float64 x near 1e5 with kernels summing to 0 (the offset cancels): float64 precision is
    kept (float32 rounding of x, about 4e-3 there, would swamp the answer)."""
    x, w = problem(seed=62)
    x = x + 1e5
    w = w - w.mean(dim=(1, 2, 3), keepdim=True)
    matches(kernel, x, w, note="(x near 1e5, zero-sum kernels)")


def raises_value_error(kernel, x: torch.Tensor, w: torch.Tensor, why: str, **options) -> None:
    lib.raises(lambda: kernel.get(FUNCTION)(x, w, **options), (), "ValueError",
               f"{described(options)} where {why}")  # fmt: skip


@exercise.check("robustness")
def groups_must_divide_input_channels(kernel):
    """groups=4 with C_in = 6 (weight (8, 1, 3, 3)) raises ValueError."""
    x = randn(1, 6, 5, 5, seed=70)
    raises_value_error(kernel, x, randn(8, 1, 3, 3, seed=71), "4 does not divide C_in=6",
                       groups=4)  # fmt: skip


@exercise.check("robustness")
def groups_must_divide_output_channels(kernel):
    """groups=3 with C_out = 8 (weight (8, 2, 3, 3), C_in 6) raises ValueError."""
    x = randn(1, 6, 5, 5, seed=72)
    raises_value_error(kernel, x, randn(8, 2, 3, 3, seed=73), "3 does not divide C_out=8",
                       groups=3)  # fmt: skip


@exercise.check("robustness")
def weight_channels_must_match(kernel):
    """A weight (12, 4, 3, 2) for x with C_in = 6 (groups=1) raises ValueError."""
    x = randn(1, 6, 5, 5, seed=74)
    raises_value_error(kernel, x, randn(12, 4, 3, 2, seed=75), "weight.shape[1]=4 != C_in=6")


@exercise.check("robustness")
def kernel_larger_than_the_input(kernel):
    """A 5 x 5 kernel on a 4 x 4 input without padding raises ValueError."""
    x = randn(1, 2, 4, 4, seed=76)
    raises_value_error(kernel, x, randn(3, 2, 5, 5, seed=77), "the 5 x 5 kernel exceeds 4 x 4")


@exercise.check("robustness")
def kernel_larger_than_the_input_fits_the_padded_input(kernel):
    """A 3 x 3 kernel on a 2 x 2 input with padding=1 fits the padded 4 x 4 input: no error,
    F.conv2d's 2 x 2 output (only a kernel larger than the padded input is invalid)."""
    x = randn(1, 2, 2, 2, seed=78)
    matches(kernel, x, randn(3, 2, 3, 3, seed=79), padding=1, note="(2 x 2 input, 3 x 3 kernel)")


# -- from scratch --------------------------------------------------------------------------


def simplest_call(kernel) -> None:
    """conv2d with the default options, so a stub answers first (the watch has seen every
    call the other checks made)."""
    x, w = problem(seed=80, size=(4, 4), kernel=(2, 2))
    kernel.get(FUNCTION)(x, w)


@exercise.check("from scratch", points=2)
def no_builtin_conv_in_source(kernel):
    """The code names none of torch's convolution built-ins (conv*, nn.Conv*, F.unfold/fold,
    im2col); its own conv2d is fine."""
    simplest_call(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch", points=2)
def no_builtin_conv_at_run_time(kernel):
    """No convolution built-in (nor im2col/col2im) ran during the hidden tests."""
    simplest_call(kernel)
    require_nothing_seen(kernel.seen)
