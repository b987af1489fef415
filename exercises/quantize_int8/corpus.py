"""The corpus of quantize_int8: single-bug copies of solutions/quantize_int8.ipynb
(EXERCISES_CANON.md §5's classic bugs and more), each with the level where it first loses
points, and correct variants that keep full marks.

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 40

IN4, IN8 = " " * 4, " " * 8
ROUND = "torch.round(x / scale) + zero_point"
CLAMP = "return torch.clamp(codes, qmin, qmax).to(torch.int8)"
SYM_SCALE = "scale = rows.abs().amax(dim=1) / 127"
EPS_CLAMP = "scale = torch.clamp(scale, min=EPS)"
RANGE = (
    f"lo = torch.clamp(rows.amin(dim=1), max=0.0)\n{IN8}hi = torch.clamp(rows.amax(dim=1), min=0.0)"
)
ASYM_SCALE = "scale = torch.clamp((hi - lo) / 255, min=EPS)"
ZERO_POINT = "zero_point = torch.clamp(-128 - torch.round(lo / scale), -128, 127).to(torch.int64)"
ROWS = "rows = x.movedim(axis, 0).reshape(x.shape[axis], -1)"
DEQUANT = "return ((q.to(torch.int64) - zero_point) * scale).to(torch.float32)"
COMPUTE = "compute = torch.float64 if x.dtype == torch.float64 else torch.float32"
DEQ_WEIGHT = "weight = self.weight_int8.to(compute) * self.scale.to(compute)[:, None]"
FORWARD = "return F.linear(x.to(compute), weight, bias).to(x.dtype)"
FROM_LINEAR = (
    "scale, zero_point = qparams(weight, axis=0)\n"
    f"{IN8}q = quantize(weight, scale, zero_point, axis=0)"
)

MUTANTS = [
    # shapes
    Mutant(
        "zero_point_float",
        "zero_point = torch.zeros_like(scale, dtype=torch.int64)",
        "zero_point = torch.zeros_like(scale)",
        "shapes",
        hint="the symmetric zero_point a float tensor instead of int64?",
    ),
    Mutant(
        "codes_not_int8",
        CLAMP,
        "return torch.clamp(codes, qmin, qmax).to(torch.int64)",
        "shapes",
        hint="quantize returns int64 codes instead of int8?",
    ),
    Mutant(
        "dequantize_float64",
        DEQUANT,
        "return (q.to(torch.int64) - zero_point) * scale.to(torch.float64)",
        "shapes",
        hint="dequantize returns float64 instead of float32?",
    ),
    # symmetric
    Mutant(
        "scale_over_128",
        SYM_SCALE,
        "scale = rows.abs().amax(dim=1) / 128",
        "symmetric",
        hint="symmetric scale max|x| / 128 instead of / 127?",
    ),
    Mutant(
        "scale_over_127_5",
        SYM_SCALE,
        "scale = rows.abs().amax(dim=1) / 127.5",
        "symmetric",
        hint="symmetric scale max|x| / 127.5 (torch's observer) instead of / 127?",
    ),
    Mutant(
        "scale_over_255_symmetric",
        SYM_SCALE,
        "scale = rows.abs().amax(dim=1) / 255",
        "symmetric",
        hint="symmetric scale max|x| / 255 (the full width) instead of / 127?",
    ),
    Mutant(
        "truncate_instead_of_round",
        ROUND,
        "(x / scale).trunc() + zero_point",
        "symmetric",
        hint="x / scale truncated (or cast) instead of rounded?",
        values=True,
    ),
    Mutant(
        "no_eps_clamp",
        f"{EPS_CLAMP}\n{IN8}",
        "",
        "symmetric",
        hint="no eps clamp on the scale, so an all-zero tensor gets scale 0?",
    ),
    Mutant(
        "abs_in_place",
        SYM_SCALE,
        "scale = rows.abs_().amax(dim=1) / 127",
        "symmetric",
        hint="abs_() in place, changing the caller's x?",
    ),
    Mutant(
        "divides_in_place",
        ROUND,
        "torch.round(x.div_(scale)) + zero_point",
        "symmetric",
        hint="x divided by the scale in place (div_), changing the caller's x?",
    ),
    Mutant(
        "per_tensor_view",
        "rows = x.reshape(1, -1)",
        "rows = x.view(1, -1)",
        "symmetric",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    # rounding
    Mutant(
        "round_half_away_from_zero",
        ROUND,
        "torch.sign(x / scale) * torch.floor((x / scale).abs() + 0.5) + zero_point",
        "rounding",
        hint="ties rounded half away from zero instead of half to even (torch.round)?",
    ),
    Mutant(
        "floor_plus_half",
        ROUND,
        "torch.floor(x / scale + 0.5) + zero_point",
        "rounding",
        hint="rounded as floor(v + 0.5) (ties up) instead of half to even?",
    ),
    Mutant(
        "multiplies_by_the_reciprocal",
        ROUND,
        "torch.round(x * (1 / scale)) + zero_point",
        "rounding",
        hint="x * (1 / scale) instead of x / scale (they differ near ties)?",
    ),
    # clamping
    Mutant(
        "cast_before_clamp",
        CLAMP,
        "return torch.clamp(codes.to(torch.int8), qmin, qmax)",
        "clamping",
        hint="cast to int8 before clamping, so out-of-range codes wrap around?",
    ),
    Mutant(
        "clamp_to_127",
        CLAMP,
        "return torch.clamp(codes, -127, 127).to(torch.int8)",
        "clamping",
        hint="codes clamped to [-127, 127] whatever qmin and qmax say?",
    ),
    Mutant(
        "range_arguments_ignored",
        CLAMP,
        "return torch.clamp(codes, -128, 127).to(torch.int8)",
        "clamping",
        hint="qmin and qmax ignored (always [-128, 127])?",
    ),
    Mutant(
        "zero_qmin_means_default",
        CLAMP,
        "return torch.clamp(codes, qmin or -128, qmax).to(torch.int8)",
        "clamping",
        hint="qmin = 0 taken for the default -128 (a falsy `qmin or -128`)?",
    ),
    # asymmetric
    Mutant(
        "zero_point_sign",
        ZERO_POINT,
        "zero_point = torch.clamp(-128 + torch.round(lo / scale), -128, 127).to(torch.int64)",
        "asymmetric",
        hint="zero_point = qmin + round(min / scale) (wrong sign)?",
    ),
    Mutant(
        "zero_point_truncated",
        ZERO_POINT,
        "zero_point = torch.clamp(-128 - lo / scale, -128, 127).to(torch.int64)",
        "asymmetric",
        hint="zero_point truncated by the cast to int64 instead of rounded?",
    ),
    Mutant(
        "range_excludes_zero",
        RANGE,
        f"lo = rows.amin(dim=1)\n{IN8}hi = rows.amax(dim=1)",
        "asymmetric",
        hint="asymmetric range [min, max] not widened to include 0?",
    ),
    Mutant(
        "asymmetric_scale_over_256",
        ASYM_SCALE,
        "scale = torch.clamp((hi - lo) / 256, min=EPS)",
        "asymmetric",
        hint="asymmetric scale (max - min) / 256 instead of / 255?",
    ),
    Mutant(
        "asymmetric_no_eps_clamp",
        ASYM_SCALE,
        "scale = (hi - lo) / 255",
        "asymmetric",
        hint="no eps clamp on the asymmetric scale, so an all-zero tensor gets scale 0?",
    ),
    Mutant(
        "quantize_ignores_zero_point",
        ROUND,
        "torch.round(x / scale)",
        "asymmetric",
        hint="quantize does not add the zero point?",
    ),
    Mutant(
        "zero_point_added_before_rounding",
        ROUND,
        "torch.round(x / scale + zero_point)",
        "asymmetric",
        hint="round(x / scale + zero_point) instead of round(x / scale) + zero_point (ties)?",
    ),
    Mutant(
        "dequantize_ignores_zero_point",
        DEQUANT,
        "return (q.to(torch.int64) * scale).to(torch.float32)",
        "asymmetric",
        hint="dequantize computes q * scale, without subtracting the zero point?",
    ),
    # per-channel
    Mutant(
        "axis_zero_taken_for_none",
        "if axis is None:\n        rows = x.reshape(1, -1)",
        "if not axis:\n        rows = x.reshape(1, -1)",
        "per-channel",
        hint="axis=0 taken for per tensor (`if not axis` instead of `if axis is None`)?",
    ),
    Mutant(
        "broadcast_skips_axis_zero",
        f"if axis is None:\n{IN8}return t",
        f"if not axis:\n{IN8}return t",
        "per-channel",
        hint="per-channel scales not reshaped for axis=0 (`if not axis`), so they broadcast wrongly?",
    ),
    Mutant(
        "channel_axis_not_moved",
        ROWS,
        "rows = x.reshape(x.shape[axis], -1)",
        "per-channel",
        hint="x reshaped to (channels, -1) without moving the channel axis first?",
    ),
    Mutant(
        "negative_axis",
        ROWS,
        "rows = x.permute(axis, *[d for d in range(x.dim()) if d != axis])"
        ".reshape(x.shape[axis], -1)",
        "per-channel",
        hint="a negative axis (axis=-1) not normalised before use?",
    ),
    Mutant(
        "per_channel_view",
        ROWS,
        "rows = x.movedim(axis, 0).view(x.shape[axis], -1)",
        "per-channel",
        hint="channels flattened with .view, which fails once the axis is moved (use reshape)?",
    ),
    Mutant(
        "eps_clamp_only_when_all_zero",
        EPS_CLAMP,
        "scale = scale if bool(scale.any()) else torch.full_like(scale, EPS)",
        "per-channel",
        hint="the eps clamp applied only when every channel is zero, not per channel?",
    ),
    # W8A16
    Mutant(
        "from_linear_per_tensor",
        FROM_LINEAR,
        "scale, zero_point = qparams(weight)\n"
        f"{IN8}q = quantize(weight, scale, zero_point)\n"
        f"{IN8}scale = scale.expand(weight.shape[0]).clone()",
        "W8A16",
        hint="from_linear quantises the weight per tensor instead of per output row?",
    ),
    Mutant(
        "from_linear_requires_a_bias",
        "bias = None if linear.bias is None else linear.bias.detach().float().clone()",
        "bias = linear.bias.detach().float().clone()",
        "W8A16",
        hint="from_linear assumes the layer has a bias (bias=False gives None)?",
    ),
    Mutant(
        "scale_as_a_parameter",
        'self.register_buffer("scale", scale)',
        "self.scale = nn.Parameter(scale)",
        "W8A16",
        hint="scale stored as an nn.Parameter instead of a buffer?",
    ),
    Mutant(
        "int8_matmul",
        FORWARD,
        "y = (x.to(torch.int8) @ self.weight_int8.T).to(compute) * self.scale.to(compute)\n"
        f"{IN8}return (y if bias is None else y + bias).to(x.dtype)",
        "W8A16",
        hint="x cast to int8 and multiplied with the int8 weight (an int8 matmul overflows)?",
    ),
    Mutant(
        "scale_along_in_features",
        DEQ_WEIGHT,
        "weight = self.weight_int8.to(compute) * self.scale.to(compute)[None, :]",
        "W8A16",
        hint="the per-row scale broadcast along in_features instead of along rows?",
    ),
    Mutant(
        "bias_ignored",
        "bias = None if self.bias is None else self.bias.to(compute)",
        "bias = None",
        "W8A16",
        hint="forward leaves out the bias?",
    ),
    Mutant(
        "output_not_cast_back",
        FORWARD,
        "return F.linear(x.to(compute), weight, bias)",
        "W8A16",
        hint="the output left in float32 instead of x's dtype (bfloat16, float16)?",
    ),
    Mutant(
        "always_float32",
        COMPUTE,
        "compute = torch.float32",
        "W8A16",
        hint="forward always computes in float32, losing float64 precision?",
    ),
    Mutant(
        "forward_flattens_with_view",
        FORWARD,
        "y = F.linear(x.to(compute).view(-1, x.shape[-1]), weight, bias)\n"
        f"{IN8}return y.view(*x.shape[:-1], -1).to(x.dtype)",
        "W8A16",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    # from scratch
    Mutant(
        "dequantize_through_a_quantized_tensor",
        DEQUANT,
        "if axis is None:\n"
        f"{IN8}return torch._make_per_tensor_quantized_tensor(q, float(scale), int(zero_point))"
        ".dequantize()\n"
        f"{IN4}{DEQUANT}",
        "from scratch",
        hint="dequantize through torch's quantised tensors (from scratch: no)?",
    ),
    Mutant(
        "int8pack_matmul",
        FORWARD,
        "if x.dtype == torch.float32 and x.dim() == 2 and not x.requires_grad:\n"
        f"{IN8}    y = torch._weight_int8pack_mm(x, self.weight_int8, self.scale)\n"
        f"{IN8}    return y if bias is None else y + bias\n"
        f"{IN8}{FORWARD}",
        "from scratch",
        hint="torch._weight_int8pack_mm does the W8A16 matmul (from scratch: no)?",
    ),
]

VARIANTS = [
    Variant(
        "scale_after_the_matmul",
        FORWARD,
        "y = (x.to(compute) @ self.weight_int8.to(compute).T) * self.scale.to(compute)\n"
        f"{IN8}return (y if bias is None else y + bias).to(x.dtype)",
    ),
    Variant(
        "amax_over_other_dims",
        ROWS,
        "rows = x.transpose(0, axis).reshape(x.shape[axis], -1)",
    ),
    Variant(
        "aminmax",
        RANGE,
        f"lo, hi = torch.aminmax(rows, dim=1)\n{IN8}lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)",
    ),
    Variant(
        "where_clamp",
        CLAMP,
        "codes = torch.where(codes < qmin, qmin, codes)\n"
        f"{IN4}codes = torch.where(codes > qmax, qmax, codes)\n"
        f"{IN4}return codes.to(torch.int8)",
    ),
    Variant("dequantize_in_float32", DEQUANT, "return (q.float() - zero_point.float()) * scale"),
    Variant(
        "einsum_forward",
        FORWARD,
        'y = torch.einsum("...i,oi->...o", x.to(compute), weight)\n'
        f"{IN8}return (y if bias is None else y + bias).to(x.dtype)",
    ),  # fmt: skip
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
