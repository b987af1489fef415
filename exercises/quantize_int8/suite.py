"""Hidden suite of `quantize_int8`: int8 quantisation parameters (symmetric absmax / asymmetric
affine, per tensor / per channel), quantise and dequantise, and a W8A16 linear layer
(EXERCISES_CANON.md §5).

Codes are exact: the suite passes the scale and zero point itself and compares with the
pinned formula `clamp(round(x / scale) + zero_point, qmin, qmax)` computed here in float32 (the
same IEEE division the candidate does), so a correct notebook cannot land on the other side
of a rounding boundary. Scales are compared at float32's tolerance (`amax / 127` and
`amax * (1/127)` may differ by an ulp), except the eps clamp, which is exact.

One bug, one place. `quantize` and `dequantize` are tested with scales and zero points the
suite gives, `qparams` on its own; rounding is seen only on exact ties (a power-of-two scale,
inputs (k + 1/2) * scale) and near-ties (for the division), clamping only with a given scale
and out-of-range inputs, zero points only at the asymmetric level, axes only at the
per-channel level (axis=0, the falsy one, first). The W8A16 layer is built from the suite's
own codes for its forward tests (`W8A16Linear(weight_int8, scale, bias)`), and its reference
is computed from the module's own buffers; `from_linear`'s codes may equal the reference's or
the notebook's own per-channel `qparams`/`quantize` (so a per-channel bug is not counted
again there).
"""

from __future__ import annotations

from typing import Any

import torch

from grader.core.outcomes import CandidateRaised
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.handle import Remote
from grader.suite.integrity import (
    require_clean_source,
    require_no_builtin_module,
    require_nothing_seen,
)

I8, I64, F16, BF16, F32, F64 = (torch.int8, torch.int64, torch.float16, torch.bfloat16,
                                torch.float32, torch.float64)  # fmt: skip
EPS = torch.finfo(torch.float32).eps
QPARAMS, QUANTIZE, DEQUANTIZE, LINEAR = "qparams", "quantize", "dequantize", "W8A16Linear"
OUT, IN = 20, 48  # the W8A16 layer: out != in, so a transposed weight or scale raises

# torch's quantisation entry points: public, private and the quantised-tensor methods, the
# decomposed ops (torch.ops.quantized_decomposed.*, seen by name), and the aten ops behind them
FUNCTIONS = (
    "quantize_per_tensor", "quantize_per_channel", "quantize_per_tensor_dynamic",
    "dequantize", "int_repr", "q_scale", "q_zero_point", "q_per_channel_scales",
    "q_per_channel_zero_points", "fake_quantize_per_tensor_affine",
    "fake_quantize_per_channel_affine", "_fake_quantize_learnable_per_tensor_affine",
    "_fake_quantize_learnable_per_channel_affine", "_choose_qparams_per_tensor",
    "choose_qparams_optimized", "_make_per_tensor_quantized_tensor",
    "_make_per_channel_quantized_tensor", "fused_moving_avg_obs_fake_quant",
    "_fused_moving_avg_obs_fq_helper", "_int_mm", "_weight_int8pack_mm",
    "fbgemm_linear_int8_weight", "fbgemm_linear_int8_weight_fp32_activation",
    "dequantize_per_tensor", "dequantize_per_channel", "quantize_per_token",
    "dequantize_per_token", "quantize_per_channel_group", "dequantize_per_channel_group",
    "choose_qparams_tensor", "choose_qparams_symmetric_tensor", "choose_qparams_per_token",
)  # fmt: skip
QUANTIZED_LINEARS = frozenset({
    "torch.ao.nn.quantized.modules.linear.Linear",
    "torch.ao.nn.quantized.dynamic.modules.linear.Linear",
    "torch.ao.nn.quantized.reference.modules.linear.Linear",
    "torch.ao.nn.quantized.modules.utils.WeightedQuantizedModule",
    "torch.ao.nn.quantized.reference.modules.utils.ReferenceQuantizedModule",
    "torch.ao.nn.qat.modules.linear.Linear",
})  # fmt: skip
QUANT = Watch(
    what="quantization",
    functions=FUNCTIONS,
    ops=(
        "quantize",
        "choose_qparams",
        "int_repr",
        "_int_mm",
        "int8pack",
        "fbgemm",
        "_make_per_",
        "q_scale",
        "q_zero_point",
        "q_per_channel",
    ),  # fmt: skip
    dispatch_pattern=r"quantize_per|fake_quantize|choose_qparams|int_repr|_int_mm|int8pack",
    instrument=(
        "torch.ao.quantization.observer:UniformQuantizationObserverBase._calculate_qparams",
    ),
    modules=QUANTIZED_LINEARS,
    private=r"quant|qparams|int_mm|int8pack",
)

exercise = Exercise(
    id="quantize_int8",
    tags=("quantization", "inference"),
    minutes=45,
    title="int8 quantisation: symmetric/asymmetric, per tensor/per channel, and a W8A16 linear",
    seed="-",
    levels=[
        "shapes",
        "symmetric",
        "rounding",
        "clamping",
        "asymmetric",
        "per-channel",
        "W8A16",
        "from scratch",
    ],
    defines=(QPARAMS, QUANTIZE, DEQUANTIZE, LINEAR),
    forbidden=(
        *FUNCTIONS,
        "ao",
        "quantization",
        "quantized",
        "MinMaxObserver",
        "PerChannelMinMaxObserver",
        "quantize_dynamic",
    ),  # fmt: skip
    watch=QUANT,
)


# --- the reference (the grader's torch, float32, the pinned formulas) ---------------------


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F32) -> torch.Tensor:
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def along(t: torch.Tensor, axis: int | None, ndim: int) -> torch.Tensor:
    if axis is None:
        return t
    shape = [1] * ndim
    shape[axis] = -1
    return t.reshape(shape)


def ref_qparams(
    x: torch.Tensor, symmetric: bool = True, axis: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero_point) by the statement's formulas, in float32."""
    rows = x.reshape(1, -1) if axis is None else x.movedim(axis, 0).reshape(x.shape[axis], -1)
    if symmetric:
        scale = torch.clamp(rows.abs().amax(dim=1) / 127, min=EPS)
        zero_point = torch.zeros_like(scale, dtype=I64)
    else:
        lo, hi = rows.amin(dim=1).clamp(max=0.0), rows.amax(dim=1).clamp(min=0.0)
        scale = torch.clamp((hi - lo) / 255, min=EPS)
        zero_point = torch.clamp(-128 - torch.round(lo / scale), -128, 127).to(I64)
    return (scale[0], zero_point[0]) if axis is None else (scale, zero_point)


def ref_quantize(x, scale, zero_point, axis=None, qmin=-128, qmax=127) -> torch.Tensor:
    codes = torch.round(x / along(scale, axis, x.dim())) + along(zero_point, axis, x.dim())
    return torch.clamp(codes, qmin, qmax).to(I8)


def ref_dequantize(q, scale, zero_point, axis=None) -> torch.Tensor:
    """(q - zero_point) * scale in float64 (the float32 answer is one rounding from it)."""
    zp = along(zero_point, axis, q.dim()).to(F64)
    return (q.to(F64) - zp) * along(scale, axis, q.dim()).to(F64)


def pair(value: Any, what: str, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """qparams' answer, strictly: a float32 scale and an int64 zero point, both of `shape`
    (the shapes level; the other levels compare values only, with `params`)."""
    scale, zero_point = params(value, what, shape)
    if scale.dtype != F32:
        raise checks.Failed(f"{what}'s scale is {str(scale.dtype)[6:]}, want float32")
    if zero_point.dtype != I64:
        raise checks.Failed(f"{what}'s zero_point is {str(zero_point.dtype)[6:]}, want int64")
    return scale, zero_point


def params(value: Any, what: str, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """qparams' answer: a floating-point scale and a real zero point, both of `shape`."""
    scale, zero_point = checks.pair(value, what, ("scale", "zero_point"))
    scale = checks.tensor(scale, f"{what}'s scale", shape)
    return scale, number_tensor(zero_point, f"{what}'s zero_point", shape)


def number_tensor(value: Any, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A real (integer or floating-point, not bool) tensor of `shape`."""
    t = checks.tensor(value, what, shape, floating=False)
    if t.dtype == torch.bool or t.is_complex():
        raise checks.Interface(f"{what}: got a {str(t.dtype)[6:]} tensor, want int8 codes")
    return t


def codes(value: Any, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    """quantize's answer, strictly: an int8 tensor of `shape` (the shapes level)."""
    q = number_tensor(value, what, shape)
    if q.dtype != I8:
        raise checks.Failed(f"{what} is {str(q.dtype)[6:]}, want int8")
    return q


def same_codes(value: Any, want: torch.Tensor, what: str) -> None:
    """quantize's answer has exactly the reference codes (compared as numbers, whatever its
    integer dtype: the dtype is the shapes level's)."""
    got = number_tensor(value, what, tuple(want.shape))
    checks.equal(got.to(F64), want.to(F64), f"{what} codes")


def values(value: Any, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    """dequantize's answer, strictly: a float32 tensor of `shape` (the shapes level)."""
    y = checks.tensor(value, what, shape)
    if y.dtype != F32:
        raise checks.Failed(f"{what} is {str(y.dtype)[6:]}, want float32")
    return y


def scalar(value: float, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.tensor(value, dtype=dtype)


# known wrong scales, as (their ratio to the right one, how the message names them)
SYMMETRIC_SLIPS = (
    (127 / 128, "max|x| / 128 (a power of two)"),
    (127 / 127.5, "max|x| / 127.5 (torch's observer)"),
    (127 / 255, "max|x| / 255 (the whole 8-bit width)"),
)
ASYMMETRIC_SLIPS = ((255 / 256, "(hi - lo) / 256"), (255 / 254, "(hi - lo) / 254"))


def same_params(value: Any, want: tuple[torch.Tensor, torch.Tensor], what: str,
                slips: tuple = ()) -> None:  # fmt: skip
    """Scales at float32's tolerance (a known wrong formula is named), zero points exactly."""
    scale, zero_point = params(value, what, tuple(want[0].shape))
    ratio = scale.to(F64) / want[0].to(F64)
    for factor, name in slips:
        if bool(((ratio - factor).abs() < 1e-5).all()):
            raise checks.Failed(f"{what}'s scale is {name}; see the statement's formula")
    checks.close(scale, want[0], f"{what}'s scale")
    checks.equal(zero_point.to(F64), want[1].to(F64), f"{what}'s zero_point")


def rows_of_magnitudes(seed: int) -> torch.Tensor:
    """A (6, 33) weight whose rows have magnitudes 1e-2 ... 1e1 (per-tensor scales would round
    the small rows to 0)."""
    return randn(6, 33, seed=seed) * torch.logspace(-2, 1, 6)[:, None]


# --- shapes -------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def qparams_per_tensor_shapes(kernel):
    """qparams(x) returns a 0-dim float32 scale and a 0-dim int64 zero_point."""
    pair(kernel.get(QPARAMS)(randn(4, 5, seed=1)), "qparams(x)", ())


@exercise.check("shapes")
def qparams_per_channel_shapes(kernel):
    """qparams(x, axis=1) on a (5, 7) x returns a scale and a zero_point of shape (7,)."""
    pair(kernel.get(QPARAMS)(randn(5, 7, seed=2), axis=1), "qparams(x, axis=1)", (7,))


@exercise.check("shapes", hidden=False)
def quantize_returns_int8(kernel):
    """quantize(x, scale, zero_point) returns int8 codes of x's shape (3-D x)."""
    x = randn(2, 3, 4, seed=3)
    got = kernel.get(QUANTIZE)(x, scalar(0.02), scalar(0, I64))
    codes(got, "quantize(x, scale, zero_point)", (2, 3, 4))


@exercise.check("shapes")
def dequantize_returns_float32(kernel):
    """dequantize(q, scale, zero_point) returns float32 values of q's shape."""
    q = lib.randint(-128, 128, 2, 3, 4, seed=4).to(I8)
    got = kernel.get(DEQUANTIZE)(q, scalar(0.02), scalar(0, I64))
    values(got, "dequantize(q, scale, zero_point)", (2, 3, 4))


# --- symmetric per tensor -----------------------------------------------------------------


@exercise.check("symmetric", points=2, hidden=False)
def symmetric_scale(kernel):
    """qparams(x): scale = max|x| / 127, zero_point = 0."""
    x = randn(8, 33, seed=11, scale=2.0)
    same_params(kernel.get(QPARAMS)(x), ref_qparams(x), "qparams(x)", SYMMETRIC_SLIPS)


@exercise.check("symmetric", points=2)
def symmetric_codes(kernel):
    """quantize(x, max|x| / 127, 0) gives round(x / scale) exactly (codes in [-127, 127])."""
    x = randn(8, 33, seed=12, scale=2.0)
    scale, zero_point = ref_qparams(x)
    same_codes(kernel.get(QUANTIZE)(x, scale, zero_point), ref_quantize(x, scale, zero_point),
               "quantize(x, scale, 0)")  # fmt: skip


@exercise.check("symmetric")
def dequantize_values(kernel):
    """dequantize(q, scale, 0) is q * scale."""
    q = lib.randint(-127, 128, 8, 33, seed=13).to(I8)
    scale, zero_point = scalar(0.0173), scalar(0, I64)
    got = checks.tensor(kernel.get(DEQUANTIZE)(q, scale, zero_point), "dequantize(q, scale, 0)",
                        q.shape)  # fmt: skip
    checks.close(got, ref_dequantize(q, scale, zero_point), "dequantize(q, scale, 0) vs q * scale")


@exercise.check("symmetric")
def all_zero_tensor(kernel):
    """An all-zero x: scale is exactly float32's eps (never 0), zero_point 0; its codes are
    0."""
    x = torch.zeros(4, 5)
    scale, zero_point = params(kernel.get(QPARAMS)(x), "qparams(zeros)", ())
    checks.equal(scale.to(F32), scalar(EPS), "qparams(zeros)'s scale (clamped to float32's eps)")
    checks.equal(zero_point.to(F64), scalar(0, F64), "qparams(zeros)'s zero_point")
    same_codes(kernel.get(QUANTIZE)(x, scalar(EPS), scalar(0, I64)), torch.zeros(4, 5, dtype=I8),
               "quantize(zeros, eps, 0)")  # fmt: skip


@exercise.check("symmetric")
def non_contiguous_input(kernel):
    """A non-contiguous x (no .view possible): qparams and quantize give the same answers."""
    x = randn(3, 4, 5, seed=14)
    held = lib.noncontiguous(x)
    scale, zero_point = ref_qparams(x)
    same_params(kernel.get(QPARAMS)(held), (scale, zero_point), "qparams(non-contiguous x)")
    same_codes(kernel.get(QUANTIZE)(held, scale, zero_point), ref_quantize(x, scale, zero_point),
               "quantize(non-contiguous x)")  # fmt: skip


@exercise.check("symmetric")
def inputs_left_unchanged(kernel):
    """qparams (symmetric and not), quantize and dequantize modify none of their inputs in
    place."""
    x = randn(6, 7, seed=15, scale=3.0)
    scale, zero_point = scalar(0.03), scalar(5, I64)
    q = lib.randint(-128, 128, 6, 7, seed=16).to(I8)
    calls: tuple[tuple[str, dict[str, torch.Tensor], dict[str, Any]], ...]
    calls = ((QPARAMS, {"x": x}, {"symmetric": True}), (QPARAMS, {"x": x}, {"symmetric": False}),
             (QUANTIZE, {"x": x, "scale": scale, "zero_point": zero_point}, {}),
             (DEQUANTIZE, {"q": q, "scale": scale, "zero_point": zero_point}, {}))  # fmt: skip
    for name, inputs, options in calls:
        held = [kernel.hold(t.clone(), n) for n, t in inputs.items()]
        kernel.get(name)(*held, **options)
        said = f"{name}({', '.join(inputs)}{''.join(f', {k}={v}' for k, v in options.items())})"
        for (n, t), h in zip(inputs.items(), held, strict=True):
            checks.equal(kernel.attribute(h, "data"), t, f"{n} after {said}")


# --- rounding ------------------------------------------------------------------------------


def ties() -> torch.Tensor:
    """(k + 1/2) for k = -20..20, exact in float32 (x = ties * scale, scale a power of two)."""
    return torch.arange(-20, 21, dtype=F32) + 0.5


@exercise.check("rounding", points=2)
def ties_round_half_to_even(kernel):
    """Exact ties: scale 2^-4 and x = (k + 1/2) * scale for k = -20..20 (x / scale is exact):
    codes round half to even (0.5 -> 0, 1.5 -> 2, -2.5 -> -2), as torch.round."""
    scale = scalar(2.0**-4)
    v = ties()
    got = number_tensor(kernel.get(QUANTIZE)(v * scale, scale, scalar(0, I64)),
                        "quantize(ties)", tuple(v.shape))  # fmt: skip
    want = ref_quantize(v * scale, scale, scalar(0, I64))
    for wrong, name in ((torch.sign(v) * torch.floor(v.abs() + 0.5), "half away from zero"),
                        (torch.floor(v + 0.5), "half up, as floor(v + 0.5)")):  # fmt: skip
        if torch.equal(got.to(F64), wrong.to(F64)):
            raise checks.Failed(f"quantize(ties): ties rounded {name}; want half to even "
                                "(torch.round)")  # fmt: skip
    checks.equal(got.to(F64), want.to(F64), "quantize(ties) codes")


@exercise.check("rounding")
def division_by_the_scale(kernel):
    """Near-ties: x within 3 ulps of (k + 1/2) * scale, scale 0.0258128: codes are
    round(x / scale), which differ from round(x * (1 / scale)) on some of them."""
    scale = scalar(0.02581283)
    base = (torch.arange(-127, 127, dtype=F64) + 0.5).mul(float(scale)).to(F32)
    near, up, down = [base], base.clone(), base.clone()
    for _ in range(3):
        up = torch.nextafter(up, torch.full_like(up, float("inf")))
        down = torch.nextafter(down, torch.full_like(down, float("-inf")))
        near += [up.clone(), down.clone()]
    x = torch.cat(near)
    want = ref_quantize(x, scale, scalar(0, I64))
    reciprocal = torch.clamp(torch.round(x * (1 / scale)), -128, 127).to(I8)
    assert not torch.equal(want, reciprocal), "the near-ties must tell division apart"
    same_codes(kernel.get(QUANTIZE)(x, scale, scalar(0, I64)), want,
               "quantize(near-ties), round(x / scale),")  # fmt: skip


# --- clamping -------------------------------------------------------------------------------


@exercise.check("clamping", points=2)
def saturates_at_the_int8_range(kernel):
    """A given scale 0.1 and inputs beyond the range (x / scale = 200, -200, 127.6, -128.4,
    -1000, 1000): codes saturate at 127 and -128, never wrap around."""
    x = torch.tensor([200.0, -200.0, 127.6, -128.4, -1000.0, 1000.0, 3.0]) * 0.1
    scale = scalar(0.1)
    same_codes(kernel.get(QUANTIZE)(x, scale, scalar(0, I64)),
               ref_quantize(x, scale, scalar(0, I64)), "quantize(x out of range)")  # fmt: skip


@exercise.check("clamping")
def narrow_range(kernel):
    """qmin=-127, qmax=127 (the symmetric narrow range): -200 * scale gives -127."""
    x = torch.tensor([200.0, -200.0, -127.4, -126.6, 5.0]) * 0.1
    scale = scalar(0.1)
    same_codes(kernel.get(QUANTIZE)(x, scale, scalar(0, I64), qmin=-127, qmax=127),
               ref_quantize(x, scale, scalar(0, I64), qmin=-127, qmax=127),
               "quantize(x, qmin=-127, qmax=127)")  # fmt: skip


@exercise.check("clamping")
def zero_qmin(kernel):
    """qmin=0 (falsy) and qmax=15 (a 4-bit unsigned range): codes in [0, 15]."""
    x = torch.tensor([-3.0, -0.4, 0.0, 4.4, 14.6, 15.4, 40.0]) * 0.1
    scale = scalar(0.1)
    same_codes(kernel.get(QUANTIZE)(x, scale, scalar(0, I64), qmin=0, qmax=15),
               ref_quantize(x, scale, scalar(0, I64), qmin=0, qmax=15),
               "quantize(x, qmin=0, qmax=15)")  # fmt: skip


# --- asymmetric -----------------------------------------------------------------------------


def check_asymmetric(kernel, x: torch.Tensor, what: str) -> None:
    """qparams(x, symmetric=False) as the reference's; a zero point by a known wrong formula
    is named."""
    answer = kernel.get(QPARAMS)(x, symmetric=False)
    scale, zero_point = ref_qparams(x, symmetric=False)
    _, got = params(answer, what, ())
    lo = min(float(x.min()), 0.0) / float(scale)
    slips = {"-128 + round(min / scale): the wrong sign": max(-128.0, -128 + round(lo)),
             "truncated by the cast, not rounded": float(int(-128 - lo))}  # fmt: skip
    for name, wrong in slips.items():
        if float(got) == wrong != float(zero_point):
            raise checks.Failed(f"{what}'s zero_point is {name}")
    same_params(answer, (scale, zero_point), what, ASYMMETRIC_SLIPS)


@exercise.check("asymmetric", points=2)
def asymmetric_mixed_sign(kernel):
    """qparams(x, symmetric=False), x in [-2.9, 2.5]: scale (max - min) / 255, zero_point
    -128 - round(min / scale) (= 9: min / scale = -136.94, which truncation would not give)."""
    order = torch.randperm(40, generator=torch.Generator().manual_seed(0))
    x = torch.linspace(-2.9, 2.5, 40)[order].reshape(5, 8)
    check_asymmetric(kernel, x, "qparams(x in [-2.9, 2.5], symmetric=False)")


@exercise.check("asymmetric")
def asymmetric_all_positive(kernel):
    """All-positive x in [0.5, 2]: the range is widened to 0, so scale 2 / 255 and
    zero_point -128."""
    x = 0.5 + 1.5 * torch.rand(6, 5, generator=torch.Generator().manual_seed(21))
    x[0, 0], x[1, 1] = 0.5, 2.0
    check_asymmetric(kernel, x, "qparams(x in [0.5, 2], symmetric=False)")


@exercise.check("asymmetric")
def asymmetric_all_negative(kernel):
    """All-negative x in [-2, -0.5]: the range is widened to 0, so zero_point 127."""
    x = -0.5 - 1.5 * torch.rand(6, 5, generator=torch.Generator().manual_seed(22))
    x[0, 0], x[1, 1] = -0.5, -2.0
    check_asymmetric(kernel, x, "qparams(x in [-2, -0.5], symmetric=False)")


@exercise.check("asymmetric")
def asymmetric_all_zero(kernel):
    """An all-zero x, symmetric=False: scale exactly float32's eps, zero_point -128."""
    scale, zero_point = params(kernel.get(QPARAMS)(torch.zeros(3, 4), symmetric=False),
                               "qparams(zeros, symmetric=False)", ())  # fmt: skip
    checks.equal(scale.to(F32), scalar(EPS), "qparams(zeros, symmetric=False)'s scale (eps)")
    checks.equal(zero_point.to(F64), scalar(-128, F64),
                 "qparams(zeros, symmetric=False)'s zero_point")  # fmt: skip


@exercise.check("asymmetric")
def quantize_adds_the_zero_point(kernel):
    """quantize(x, scale, zero_point=37): round(x / scale) + 37, clamped."""
    x = randn(6, 7, seed=23)
    scale, zero_point = scalar(0.02), scalar(37, I64)
    same_codes(kernel.get(QUANTIZE)(x, scale, zero_point), ref_quantize(x, scale, zero_point),
               "quantize(x, scale, 37)")  # fmt: skip


@exercise.check("asymmetric")
def zero_point_added_after_rounding(kernel):
    """Exact ties (scale 2^-4) with an odd zero_point 37: round(x / scale) + 37, not
    round(x / scale + 37) (they differ on ties)."""
    scale, zero_point = scalar(2.0**-4), scalar(37, I64)
    x = ties() * scale
    same_codes(kernel.get(QUANTIZE)(x, scale, zero_point), ref_quantize(x, scale, zero_point),
               "quantize(ties, scale, 37)")  # fmt: skip


@exercise.check("asymmetric")
def dequantize_uses_the_zero_point(kernel):
    """dequantize(q, scale, zero_point=-20) is (q + 20) * scale."""
    q = lib.randint(-128, 128, 6, 7, seed=24).to(I8)
    scale, zero_point = scalar(0.0173), scalar(-20, I64)
    got = checks.tensor(kernel.get(DEQUANTIZE)(q, scale, zero_point),
                        "dequantize(q, scale, -20)", q.shape)  # fmt: skip
    checks.close(got, ref_dequantize(q, scale, zero_point),
                 "dequantize(q, scale, -20) vs (q - zero_point) * scale")  # fmt: skip


@exercise.check("asymmetric")
def zero_round_trips_exactly(kernel):
    """With its own asymmetric parameters, quantize then dequantize maps 0.0 to exactly 0.0."""
    x = randn(5, 8, seed=25) + 0.7
    x[1, 3] = x[4, 0] = 0.0
    scale, zero_point = params(kernel.get(QPARAMS)(x, symmetric=False), "qparams(x, False)", ())
    q = number_tensor(kernel.get(QUANTIZE)(x, scale, zero_point), "quantize(x)", tuple(x.shape))
    back = checks.tensor(kernel.get(DEQUANTIZE)(q, scale, zero_point), "dequantize(q)", x.shape)
    lib.exactly_zero(back[x == 0], "dequantize(quantize(0.0)) with asymmetric parameters")


# --- per-channel ----------------------------------------------------------------------------


@exercise.check("per-channel", points=2)
def per_channel_scales_on_axis_0(kernel):
    """qparams(W, axis=0) (axis 0, falsy, is an axis): one scale per row, max|row| / 127, for
    rows of magnitudes 1e-2 ... 1e1; zero points 0."""
    W = rows_of_magnitudes(31)
    same_params(kernel.get(QPARAMS)(W, axis=0), ref_qparams(W, axis=0), "qparams(W, axis=0)",
                SYMMETRIC_SLIPS)  # fmt: skip


@exercise.check("per-channel")
def per_channel_codes_on_axis_0(kernel):
    """quantize and dequantize with per-row scales and zero points (axis=0): exact codes (as
    torch.quantize_per_channel's), dequantised rows (q - zp) * scale of their own row."""
    W = rows_of_magnitudes(32)
    scale, zero_point = ref_qparams(W, axis=0)
    zero_point = zero_point + torch.tensor([0, 3, -2, 0, 1, 0])
    want = ref_quantize(W, scale, zero_point, axis=0)
    same_codes(kernel.get(QUANTIZE)(W, scale, zero_point, axis=0), want,
               "quantize(W, per-row scales, axis=0)")  # fmt: skip
    back = kernel.get(DEQUANTIZE)(want, scale, zero_point, axis=0)
    checks.close(checks.tensor(back, "dequantize(q, axis=0)", W.shape),
                 ref_dequantize(want, scale, zero_point, axis=0),
                 "dequantize(q, per-row scales, axis=0)")  # fmt: skip


@exercise.check("per-channel")
def other_and_negative_axes(kernel):
    """qparams on axis=1 and axis=-1 of a (5, 7) x: one scale per column, the same for
    both; quantize with axis=-1 gives the reference codes."""
    x = randn(5, 7, seed=33) * torch.logspace(-1, 1, 7)
    want = ref_qparams(x, axis=1)
    f = kernel.get(QPARAMS)
    for axis in (1, -1):
        same_params(f(x, axis=axis), want, f"qparams(x, axis={axis})")
    same_codes(kernel.get(QUANTIZE)(x, *want, axis=-1), ref_quantize(x, *want, axis=1),
               "quantize(x, per-column scales, axis=-1)")  # fmt: skip


@exercise.check("per-channel")
def zero_channel(kernel):
    """A weight with one all-zero row: that row's scale is exactly float32's eps, the others
    max|row| / 127."""
    W = rows_of_magnitudes(34)
    W[2] = 0.0
    scale, _ = params(kernel.get(QPARAMS)(W, axis=0), "qparams(W with a zero row, axis=0)", (6,))
    checks.equal(scale[2].to(F32), scalar(EPS), "the zero row's scale (clamped to float32's eps)")
    checks.close(scale, ref_qparams(W, axis=0)[0], "qparams(W with a zero row, axis=0)'s scale")


@exercise.check("per-channel")
def per_channel_asymmetric(kernel):
    """qparams(W, symmetric=False, axis=0): each row's own range (widened to 0)."""
    W = randn(6, 9, seed=35) * torch.logspace(-1, 1, 6)[:, None] + torch.linspace(-2, 2, 6)[:, None]
    same_params(kernel.get(QPARAMS)(W, symmetric=False, axis=0),
                ref_qparams(W, symmetric=False, axis=0), "qparams(W, False, axis=0)")  # fmt: skip


@exercise.check("per-channel")
def per_channel_non_contiguous(kernel):
    """A non-contiguous (3, 4, 5) x with axis=1: per-channel scales and codes as usual."""
    x = randn(3, 4, 5, seed=36) * torch.logspace(-1, 1, 4)[:, None]
    held = lib.noncontiguous(x)
    want = ref_qparams(x, axis=1)
    same_params(kernel.get(QPARAMS)(held, axis=1), want, "qparams(non-contiguous x, axis=1)")
    same_codes(kernel.get(QUANTIZE)(held, *want, axis=1), ref_quantize(x, *want, axis=1),
               "quantize(non-contiguous x, axis=1)")  # fmt: skip


# --- W8A16 ----------------------------------------------------------------------------------


def weight(seed: int) -> torch.Tensor:
    """An (OUT, IN) float32 weight with rows of different magnitudes."""
    return randn(OUT, IN, seed=seed, scale=0.5) * torch.logspace(-1, 0.5, OUT)[:, None]


def given_linear(kernel, W: torch.Tensor, b: torch.Tensor | None):
    """An nn.Linear made in the kernel (through the notebook's `torch`), holding W and b."""
    nn = kernel.attribute(kernel.get("torch"), "nn")
    linear = nn.Linear(IN, OUT, bias=b is not None)
    lib.load_state(linear, "nn.Linear", {"weight": W} if b is None else {"weight": W, "bias": b})
    return linear


def layer(kernel, seed: int, bias: bool = True):
    """W8A16Linear(weight_int8, scale, bias) built from the suite's own codes; (module,
    the buffers it was given)."""
    W = weight(seed)
    scale, zero_point = ref_qparams(W, axis=0)
    buffers = {"weight_int8": ref_quantize(W, scale, zero_point, axis=0), "scale": scale}
    if bias:
        buffers["bias"] = randn(OUT, seed=seed + 1)
    return kernel.new(LINEAR, *buffers.values()), buffers


def reference(buffers: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """x @ (weight_int8 * scale).T + bias in float64."""
    w = buffers["weight_int8"].to(F64) * buffers["scale"].to(F64)[:, None]
    y = x.to(F64) @ w.T
    return y + buffers["bias"].to(F64) if "bias" in buffers else y


def forward_matches(module, buffers, x: torch.Tensor, what: str) -> None:
    """module(x) has x's dtype and matches the reference (a missing bias is named)."""
    y = checks.tensor(module(x), what, (*x.shape[:-1], OUT))
    if y.dtype != x.dtype:
        raise checks.Failed(f"{what} is {str(y.dtype)[6:]}, want {str(x.dtype)[6:]} (x's)")
    want = reference(buffers, x)
    if "bias" in buffers:
        unbiased = want - buffers["bias"].to(F64)
        tol = checks.tolerance(y.dtype)
        if bool((checks.tolerance_ratio(y, unbiased, tol) <= 1).all()):
            raise checks.Failed(f"{what} is x @ (weight_int8 * scale).T without the bias")
    checks.close(y, want, f"{what} vs x @ (weight_int8 * scale).T + bias")


def own_per_row_codes(kernel, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(codes, scales) of W by the notebook's own qparams(W, axis=0) and quantize; None when
    they fail to answer."""
    try:
        scale, zero_point = pair(kernel.get(QPARAMS)(W, axis=0), "qparams(W, axis=0)", (OUT,))
        q = codes(kernel.get(QUANTIZE)(W, scale, zero_point, axis=0), "quantize", (OUT, IN))
    except (CandidateRaised, checks.Failed, checks.Interface):
        return None
    return q, scale


def from_linear(kernel, linear) -> Remote:
    """W8A16Linear.from_linear(linear): an object (a module), not plain data."""
    module = kernel.get(LINEAR).from_linear(linear)
    if not isinstance(module, Remote):
        raise checks.Interface(f"W8A16Linear.from_linear(linear) gave {checks.describe(module)}, "
                               "want a W8A16Linear")  # fmt: skip
    return module


def module_state(module, owner: str) -> dict[str, Any]:
    state = lib.state_dict(module, owner)
    return {str(k): v for k, v in state.items()}


@exercise.check("W8A16", points=2, hidden=False)
def from_linear_quantises_each_row(kernel):
    """W8A16Linear.from_linear(linear): state_dict holds exactly weight_int8 (20, 48) int8,
    the symmetric per-row codes; scale (20,) float32, max|row| / 127; bias, linear.bias."""
    W, b = weight(41), randn(OUT, seed=42)
    module = from_linear(kernel, given_linear(kernel, W, b))
    owner = "W8A16Linear.from_linear(linear)"
    state = module_state(module, owner)
    if set(state) != {"weight_int8", "scale", "bias"}:
        found = ", ".join(sorted(state)) or "nothing"
        raise checks.Failed(f"{owner}.state_dict() holds {found}; want exactly weight_int8, "
                            "scale, bias")  # fmt: skip
    q = codes(state["weight_int8"], f"{owner}.weight_int8", (OUT, IN))
    scale = checks.tensor(state["scale"], f"{owner}.scale", (OUT,))
    want_scale, zero_point = ref_qparams(W, axis=0)
    want_q = ref_quantize(W, want_scale, zero_point, axis=0)
    if not torch.equal(q, want_q):  # the notebook's own per-channel quantisation also counts
        own = own_per_row_codes(kernel, W)
        if own is not None and torch.equal(q, own[0]):
            want_q, want_scale = own
    checks.equal(q, want_q, f"{owner}.weight_int8 (symmetric, per row)")
    checks.close(scale, want_scale, f"{owner}.scale")
    if scale.dtype != F32:
        raise checks.Failed(f"{owner}.scale is {str(scale.dtype)[6:]}, want float32")
    checks.equal(checks.tensor(state["bias"], f"{owner}.bias", (OUT,)), b, f"{owner}.bias")


@exercise.check("W8A16")
def from_linear_without_bias(kernel):
    """from_linear of an nn.Linear without bias: no bias in state_dict."""
    W = weight(43)
    module = from_linear(kernel, given_linear(kernel, W, None))
    owner = "W8A16Linear.from_linear(linear without bias)"
    state = module_state(module, owner)
    if "bias" in state:
        raise checks.Failed(f"{owner}.state_dict() holds a bias, want none")


@exercise.check("W8A16")
def from_linear_leaves_the_linear_unchanged(kernel):
    """from_linear leaves the given nn.Linear's weight and bias as they were."""
    W, b = weight(45), randn(OUT, seed=46)
    linear = given_linear(kernel, W, b)
    kernel.get(LINEAR).from_linear(linear)
    state = lib.require_state(lib.state_dict(linear, "nn.Linear"), ["weight", "bias"], "nn.Linear")
    checks.equal(state["weight"], W, "linear.weight after from_linear(linear)")
    checks.equal(state["bias"], b, "linear.bias after from_linear(linear)")


@exercise.check("W8A16")
def holds_buffers_not_parameters(kernel):
    """W8A16Linear(weight_int8, scale, bias) has no parameters: its tensors are buffers
    (nothing to train; backprop reaches x only)."""
    module, _ = layer(kernel, seed=47)
    x, r = randn(3, IN, seed=48), randn(3, OUT, seed=49)
    params = kernel.grad(module, (x,), {}, wrt=[0], cotangent=r)["params"]
    if params:
        names = ", ".join(sorted(map(str, params))) if isinstance(params, dict) else "some"
        raise checks.Failed(f"W8A16Linear has parameters ({names}), want buffers only")


@exercise.check("W8A16", points=2)
def forward_float32(kernel):
    """float32 x (4, 5, 48): x @ (weight_int8 * scale).T + bias, from the module's buffers."""
    module, buffers = layer(kernel, seed=51)
    forward_matches(module, buffers, randn(4, 5, IN, seed=52), "W8A16Linear(x)")


@exercise.check("W8A16")
def forward_without_bias(kernel):
    """W8A16Linear(weight_int8, scale) (bias None): x @ (weight_int8 * scale).T."""
    module, buffers = layer(kernel, seed=53, bias=False)
    forward_matches(module, buffers, randn(4, IN, seed=54), "W8A16Linear(x), no bias")


@exercise.check("W8A16")
def forward_half_precision(kernel):
    """bfloat16 x and float16 x (~ 30): the output has x's dtype and matches the reference at
    that dtype's tolerance (computed in float32)."""
    module, buffers = layer(kernel, seed=55)
    for dtype in (BF16, F16):
        x = randn(4, 5, IN, seed=56, scale=30.0, dtype=dtype)
        forward_matches(module, buffers, x, f"W8A16Linear({str(dtype)[6:]} x)")


@exercise.check("W8A16")
def forward_float64_large_magnitudes(kernel):
    """float64 x ~ 1e4: computed in float64 (float32 rounding would show at rtol 1e-7)."""
    module, buffers = layer(kernel, seed=57)
    x = randn(4, 5, IN, seed=58, scale=1e4, dtype=F64)
    forward_matches(module, buffers, x, "W8A16Linear(float64 x ~ 1e4)")


@exercise.check("W8A16")
def forward_non_contiguous(kernel):
    """A non-contiguous x (2, 3, 48) (no .view possible) gives the reference's output."""
    module, buffers = layer(kernel, seed=59)
    x = randn(2, 3, IN, seed=60)
    forward_matches(module, buffers, lib.noncontiguous(x), "W8A16Linear(non-contiguous x)")


@exercise.check("W8A16")
def forward_leaves_x_unchanged(kernel):
    """forward modifies neither x (float32, bfloat16) nor the module's buffers."""
    module, buffers = layer(kernel, seed=61)
    for dtype in (F32, BF16):
        x = randn(4, IN, seed=62, dtype=dtype)
        held = kernel.hold(x.clone(), "x")
        module(held)
        checks.equal(kernel.attribute(held, "data"), x, f"{str(dtype)[6:]} x after forward")
    state = module_state(module, "W8A16Linear")
    for name, value in buffers.items():
        checks.equal(state.get(name), value, f"W8A16Linear.{name} after forward")


# --- from scratch -----------------------------------------------------------------------------


def modules_to_judge(kernel) -> list[tuple[Any, str]]:
    """The layers whose submodules the from-scratch verdict reads: one built by the
    constructor, and from_linear's when it answers (a failing from_linear lost its points at
    the W8A16 level, not here)."""
    x = randn(4, IN, seed=71)
    kernel.get(QPARAMS)(x)  # the simplest call first, so that a stub answers
    judged = [(layer(kernel, seed=72)[0], "W8A16Linear(weight_int8, scale, bias)")]
    try:
        built = kernel.get(LINEAR).from_linear(given_linear(kernel, weight(73), None))
    except CandidateRaised as error:
        if error.not_implemented:
            raise
        return judged
    return [*judged, (built, "W8A16Linear.from_linear(linear)")]


@exercise.check("from scratch")
def no_quantization_builtin_in_source(kernel):
    """The code names none of torch's quantisation built-ins (its own quantize and dequantize
    are fine)."""
    kernel.get(QPARAMS)(randn(4, 5, seed=73))
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch")
def no_quantization_builtin_at_run_time(kernel):
    """No quantisation built-in ran during the hidden tests, and the layer holds no quantised
    module of torch's."""
    for module, owner in modules_to_judge(kernel):
        if isinstance(module, Remote):
            require_no_builtin_module(kernel.modules(module), owner, exercise.watch)
    require_nothing_seen(kernel.seen)
