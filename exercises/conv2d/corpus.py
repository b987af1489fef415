"""Single-bug mutants of solutions/conv2d.ipynb, each with the level where it must first
lose points (EXERCISES_CANON.md section 8's classic bugs, and more), and correct variants
that keep full marks."""

from __future__ import annotations

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 24

PAD = "padded = F.pad(x, (pw, pw, ph, ph))  # (left, right, top, bottom)"
XG = "xg = padded.reshape(n, groups, c_group, h + 2 * ph, w + 2 * pw)"
WG = "wg = weight.reshape(groups, c_out // groups, c_group, kh, kw)"
H_OUT = "h_out = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1"
TAPS = "top, left = i * dh, j * dw"
ROWS = "rows = slice(top, top + sh * (h_out - 1) + 1, sh)"
EINSUM = 'out = out + torch.einsum("ngchw,goc->ngohw", xg[..., rows, cols], wg[..., i, j])'
OUT = "out = out.reshape(n, c_out, h_out, w_out)"
BIAS = "out = out + bias.reshape(1, -1, 1, 1)"
LOOP = (
    """    out = 0
    for i in range(kh):  # one kernel tap at a time: a strided window of the input
        for j in range(kw):
            top, left = i * dh, j * dw
            rows = slice(top, top + sh * (h_out - 1) + 1, sh)
            cols = slice(left, left + sw * (w_out - 1) + 1, sw)
            """
    + EINSUM
)

MUTANTS = [
    Mutant(
        "uses_torch_conv2d",
        "    out = out.reshape(n, c_out, h_out, w_out)\n",
        "    out = F.conv2d(x, weight, None, stride, padding, dilation, groups)\n",
        "from scratch",
        hint="the convolution computed by torch's F.conv2d instead of your own code?",
    ),
    # shapes
    Mutant(
        "kernel_width_in_the_height",
        H_OUT,
        "h_out = (h + 2 * ph - dh * (kw - 1) - 1) // sh + 1",
        "shapes",
        hint="the output height computed with the kernel's width kW instead of its height kH?",
        values=True,
    ),
    Mutant(
        "weight_axes_in_out_swapped",
        "c_out, c_group, kh, kw = weight.shape",
        "c_group, c_out, kh, kw = weight.shape",
        "shapes",
        hint="weight read as (C_in, C_out, kH, kW) instead of (C_out, C_in // groups, kH, kW)?",
        values=True,
    ),
    Mutant(
        "returns_float64",
        "    return out\n",
        "    return out.double()\n",
        "shapes",
        hint="the output returned in float64 whatever x's dtype (a float32 x gives float32)?",
    ),
    # values
    Mutant(
        "kernel_flipped",
        WG,
        "wg = weight.flip(-2, -1).reshape(groups, c_out // groups, c_group, kh, kw)",
        "values",
        hint="the kernel flipped (true convolution) instead of cross-correlation, as F.conv2d?",
        values=True,
    ),
    Mutant(
        "weight_transposed",
        WG,
        "wg = weight.transpose(0, 1).reshape(groups, c_out // groups, c_group, kh, kw)",
        "values",
        hint="weight's output and input channel axes mixed up when it is reshaped?",
        values=True,
    ),
    Mutant(
        "bias_on_the_width_axis",
        BIAS,
        "out = out + bias.reshape(1, 1, 1, -1)",
        "values",
        hint="bias broadcast along the last (width) axis instead of the channel axis?",
    ),
    Mutant(
        "bias_tested_for_truth",
        "if bias is not None:",
        "if bias:",
        "values",
        hint="`if bias:` on a tensor (ambiguous) instead of `if bias is not None:`?",
    ),
    Mutant(
        "computes_in_float32",
        EINSUM,
        'out = out + torch.einsum("ngchw,goc->ngohw", xg[..., rows, cols].float(), '
        "wg[..., i, j].float()).to(x.dtype)",
        "values",
        hint="products summed in float32 (.float()) even for float64 inputs?",
        values=True,
    ),
    # padding
    Mutant(
        "padding_on_one_side",
        PAD,
        "padded = F.pad(x, (0, 2 * pw, 0, 2 * ph))",
        "padding",
        hint="zeros added only on one side (bottom/right) instead of both?",
    ),
    Mutant(
        "padding_axes_swapped",
        PAD,
        "padded = F.pad(x, (ph, ph, pw, pw))",
        "padding",
        hint="F.pad given (top, bottom, left, right): its order is (left, right, top, bottom)?",
    ),
    Mutant(
        "padding_skipped_when_one_is_zero",
        PAD,
        "padded = F.pad(x, (pw, pw, ph, ph)) if ph and pw else x",
        "padding",
        hint="no padding at all when one of (pH, pW) is 0 (a falsy test of the pair)?",
    ),
    Mutant(
        "padding_capped_at_the_kernel",
        "(ph, pw), (dh, dw) = as_pair(stride), as_pair(padding), as_pair(dilation)",
        "(ph, pw), (dh, dw) = as_pair(stride), as_pair(padding), as_pair(dilation)\n"
        "    ph, pw = min(ph, weight.shape[2] - 1), min(pw, weight.shape[3] - 1)",
        "padding",
        hint="padding limited to kernel size - 1 (a 'full' convolution) instead of as given?",
    ),
    # stride and dilation
    Mutant(
        "ceil_output_size",
        H_OUT,
        "h_out = -(-(h + 2 * ph - dh * (kh - 1) - 1) // sh) + 1",
        "stride and dilation",
        hint="the output size rounded up (ceil) instead of down (floor)?",
    ),
    Mutant(
        "dilation_left_out_of_the_size",
        H_OUT,
        "h_out = (h + 2 * ph - kh) // sh + 1",
        "stride and dilation",
        hint="output size computed with the kernel's size kH instead of its dilated extent "
        "dH*(kH - 1) + 1?",
    ),
    Mutant(
        "dilation_ignored",
        TAPS,
        "top, left = i, j",
        "stride and dilation",
        hint="kernel taps read from adjacent pixels, not dilation pixels apart?",
    ),
    Mutant(
        "window_end_ignores_stride",
        ROWS,
        "rows = slice(top, top + h_out, sh)",
        "stride and dilation",
        hint="the strided window along H ends at top + H_out instead of top + sH*(H_out - 1) + 1?",
    ),
    Mutant(
        "dilation_width_from_height",
        TAPS,
        "top, left = i * dh, j * dh",
        "stride and dilation",
        hint="the height's dilation dH used along the width too?",
    ),
    # groups
    Mutant(
        "groups_interleaved",
        XG,
        "xg = padded.reshape(n, c_group, groups, h + 2 * ph, w + 2 * pw).transpose(1, 2)",
        "groups",
        hint="input channels dealt to groups in turn (c % groups) instead of in contiguous blocks?",
    ),
    Mutant(
        "every_group_uses_the_first_kernels",
        WG,
        "wg = weight[: c_out // groups].reshape(1, c_out // groups, c_group, kh, kw)"
        ".expand(groups, -1, -1, -1, -1)",
        "groups",
        hint="every group uses the first C_out // groups kernels instead of its own block?",
    ),
    Mutant(
        "output_channels_interleaved",
        OUT,
        "out = out.transpose(1, 2).reshape(n, c_out, h_out, w_out)",
        "groups",
        hint="output channels ordered kernel-major (o, g) instead of group by group?",
    ),
    # gradients
    Mutant(
        "x_detached",
        PAD,
        "padded = F.pad(x.detach(), (pw, pw, ph, ph))",
        "gradients",
        hint="x detached (or taken through .data), so no gradient reaches it?",
    ),
    Mutant(
        "weight_detached",
        WG,
        "wg = weight.detach().reshape(groups, c_out // groups, c_group, kh, kw)",
        "gradients",
        hint="weight detached, so no gradient reaches it?",
    ),
    Mutant(
        "bias_detached",
        BIAS,
        "out = out + bias.detach().reshape(1, -1, 1, 1)",
        "gradients",
        hint="bias detached, so no gradient reaches it?",
    ),
    # robustness
    Mutant(
        "weight_through_view",
        WG,
        "wg = weight.view(c_out, c_group * kh * kw).view(groups, c_out // groups, c_group, kh, kw)",
        "robustness",
        hint="weight flattened with .view, which fails on a non-contiguous weight (use reshape)?",
    ),
    Mutant(
        "bias_unsqueezed_in_place",
        BIAS,
        "out = out + bias.unsqueeze_(-1).unsqueeze_(-1)",
        "values",
        hint="bias reshaped in place (unsqueeze_), changing the caller's tensor?",
    ),
    Mutant(
        "no_groups_check",
        "if c_in % groups or c_out % groups:",
        "if c_in % groups:",
        "robustness",
        hint="no ValueError when groups does not divide C_out?",
    ),
    Mutant(
        "groups_must_divide_only_c_out",
        "if c_in % groups or c_out % groups:",
        "if c_out % groups:",
        "robustness",
        hint="no ValueError when groups does not divide C_in?",
    ),
    Mutant(
        "no_weight_channels_check",
        "if c_group != c_in // groups:",
        "if False:",
        "robustness",
        hint="no ValueError when weight.shape[1] != C_in // groups?",
    ),
    Mutant(
        "no_output_size_check",
        "if h_out < 1 or w_out < 1:",
        "if h_out < 0 or w_out < 0:",
        "robustness",
        hint="no ValueError when the dilated kernel is larger than the padded input?",
    ),
    Mutant(
        "size_check_ignores_padding",
        "if h_out < 1 or w_out < 1:",
        "if dh * (kh - 1) + 1 > h or dw * (kw - 1) + 1 > w:",
        "robustness",
        hint="ValueError when the kernel is larger than the unpadded input, though the padded "
        "input fits it?",
    ),
]

VARIANTS = [
    # im2col with Tensor.unfold (allowed: a view of the padded input, not F.unfold)
    Variant(
        "tensor_unfold",
        LOOP,
        """    ext_h, ext_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    windows = xg.unfold(3, ext_h, sh).unfold(4, ext_w, sw)[..., ::dh, ::dw]
    out = torch.einsum("ngchwij,gocij->ngohw", windows, wg)""",
    ),
    # broadcast products summed over the channel axis instead of einsum
    Variant(
        "broadcast_and_sum",
        EINSUM,
        "out = out + (xg[:, :, None, :, rows, cols] * wg[None, ..., i, j, None, None]).sum(3)",
    ),
    # zero padding written by hand (a zeros tensor, x copied into its middle)
    Variant(
        "manual_zero_padding",
        PAD,
        "padded = x.new_zeros(n, c_in, h + 2 * ph, w + 2 * pw)\n"
        "    padded[:, :, ph : ph + h, pw : pw + w] = x",
    ),
    # a loop over the groups, each a matmul of flattened windows
    Variant(
        "loop_over_groups_as_strided",
        LOOP + "\n    out = out.reshape(n, c_out, h_out, w_out)",
        """    hp, wp = h + 2 * ph, w + 2 * pw
    flat = padded.contiguous()
    s = flat.stride()
    blocks = []
    for g in range(groups):
        part = flat[:, g * c_group : (g + 1) * c_group]
        windows = part.as_strided(
            (n, c_group, kh, kw, h_out, w_out),
            (s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw),
            part.storage_offset(),
        )
        kernels = weight[g * (c_out // groups) : (g + 1) * (c_out // groups)].reshape(c_out // groups, -1)
        cols = windows.reshape(n, c_group * kh * kw, h_out * w_out)
        blocks.append((kernels @ cols).reshape(n, c_out // groups, h_out, w_out))
    out = torch.cat(blocks, dim=1)""",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
