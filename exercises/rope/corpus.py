"""Single-bug mutants of solutions/rope.ipynb, each with the level where it must first lose
points, and correct variants that keep full marks."""

from __future__ import annotations

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

ROTATE_HALF = "rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)"
ROTATION = "return x * cos + rotated_half * sin"
ANGLES = "angles = positions.to(dtype)[..., None] * inv_freq"
DUPLICATE = "angles = torch.cat((angles, angles), dim=-1)"
INV_FREQ = "inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim)"
WORK = "work = torch.float64 if x.dtype == torch.float64 else torch.float32"
PER_SAMPLE = "cos, sin = cos.reshape(shape), sin.reshape(shape)"
Q_ROT = "q_rot = rotate(q.float(), cos, sin).to(q.dtype)"
K_ROT = "k_rot = rotate(k.float(), cos, sin).to(k.dtype)"
CACHE = "cos, sin = rope_cos_sin(head_dim, torch.arange(max_position), theta)"
LOOKUP = "cos, sin = self.cos_cached[positions], self.sin_cached[positions]"

MUTANTS = [
    # shapes
    Mutant(
        "cos_sin_half_width",
        DUPLICATE,
        "angles = angles",
        "shapes",
        hint="cos/sin of width head_dim/2: the angles not repeated to head_dim?",
        values=True,  # the tables' width: every answer
    ),
    Mutant(
        "broadcast_wrong_axis",
        "shape = (cos.shape[0], *[1] * (x.dim() - 3), *cos.shape[1:])",
        "shape = (*cos.shape[:2], 1, cos.shape[2])",
        "shapes",
        hint="(B, T) cos/sin unsqueezed at dim 2 ((B, T, 1, D)) instead of over the heads?",
    ),
    Mutant(
        "no_cast_back",
        "return rotate(xw, cos, sin).to(x.dtype)",
        "return rotate(xw, cos, sin)",
        "shapes",
        hint="result left in the compute dtype (float32) instead of cast back to x.dtype?",
    ),
    Mutant(
        "q_k_swapped",
        "return q_rot, k_rot",
        "return k_rot, q_rot",
        "shapes",
        hint="RotaryEmbedding.forward returns (k_rot, q_rot) instead of (q_rot, k_rot)?",
    ),
    # rotation
    Mutant(
        "mixed_layout",
        DUPLICATE,
        "angles = angles.repeat_interleave(2, dim=-1)",
        "rotation",
        hint="cos/sin laid out interleaved (repeat_interleave) but rotated with rotate_half?",
        values=True,  # the rotation's formula
    ),
    Mutant(
        "position_off_by_one",
        ANGLES,
        "angles = (positions + 1).to(dtype)[..., None] * inv_freq",
        "rotation",
        hint="positions counted from 1: position 0 is rotated?",
        values=True,  # every angle
    ),
    Mutant(
        "sin_cos_swapped",
        "return angles.cos(), angles.sin()",
        "return angles.sin(), angles.cos()",
        "rotation",
        hint="rope_cos_sin returns (sin, cos) instead of (cos, sin)?",
        values=True,  # every angle's cos and sin
    ),
    Mutant(  # float32's rounding breaks the invariants at float64's tolerance first
        "float64_in_float32",
        WORK,
        "work = torch.float32",
        "rotation",
        hint="float64 input rotated with float32 angles and arithmetic?",
        values=True,  # every float64 answer's precision
    ),
    # values
    Mutant(
        "interleaved_pairs",
        f"{ROTATE_HALF}\n    {ROTATION}",
        "c, s = cos[..., :half], sin[..., :half]\n"
        "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
        "    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)",
        "values",
        hint="adjacent pairs (x[2i], x[2i+1], GPT-J/Meta) instead of half-split (x[i], x[i+d/2])?",
        values=True,  # the pairing
    ),
    Mutant(
        "rotate_half_sign",
        ROTATE_HALF,
        "rotated_half = torch.cat((x[..., half:], -x[..., :half]), dim=-1)",
        "values",
        hint="rotate_half as cat(x2, -x1) instead of cat(-x2, x1): rotation by -angle?",
        values=True,  # the rotation's direction
    ),
    Mutant(
        "freq_i_over_d",
        INV_FREQ,
        "inv_freq = 1.0 / theta ** (torch.arange(head_dim // 2, dtype=dtype) / head_dim)",
        "values",
        hint="frequencies theta^(-i/d) instead of theta^(-2i/d)?",
        values=True,  # every frequency
    ),
    Mutant(
        "k_not_rotated",
        K_ROT,
        "k_rot = k",
        "values",
        hint="RotaryEmbedding rotates q but returns k unrotated?",
    ),
    # positions
    Mutant(
        "positions_ignored",
        ANGLES,
        "angles = torch.arange(positions.shape[-1], dtype=dtype).expand(positions.shape)"
        "[..., None] * inv_freq",
        "positions",
        hint="positions ignored: angles from arange(T), whatever positions say?",
    ),
    Mutant(
        "first_sample_positions_for_all",
        PER_SAMPLE,
        "cos, sin = cos[:1].reshape(1, *shape[1:]), sin[:1].reshape(1, *shape[1:])",
        "positions",
        hint="(B, T) positions: the first sample's row used for every sample?",
    ),
    Mutant(
        "cache_sliced_not_indexed",
        LOOKUP,
        "cos, sin = self.cos_cached[: positions.shape[-1]], self.sin_cached[: positions.shape[-1]]",
        "positions",
        hint="RotaryEmbedding takes the first T rows of its tables (cos[:T]), not cos[positions]?",
    ),
    Mutant(
        "module_keeps_the_first_tables",
        LOOKUP,
        'if not hasattr(self, "_tables"):  # looked up once, reused by every later call\n'
        "            self._tables = self.cos_cached[positions], self.sin_cached[positions]\n"
        "        cos, sin = self._tables",
        "positions",
        hint="RotaryEmbedding keeps the cos/sin of its first call and reuses them at other "
        "positions?",
    ),
    # frequencies
    Mutant(
        "theta_hard_coded",
        INV_FREQ,
        "inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim)",
        "frequencies",
        hint="rope_cos_sin uses 10000 whatever theta is?",
    ),
    Mutant(
        "theta_not_passed",
        "rope_cos_sin(x.shape[-1], positions, theta, dtype=work)",
        "rope_cos_sin(x.shape[-1], positions, dtype=work)",
        "frequencies",
        hint="apply_rope does not pass theta on (the default 10000 always)?",
    ),
    Mutant(
        "module_theta_not_passed",
        CACHE,
        "cos, sin = rope_cos_sin(head_dim, torch.arange(max_position))",
        "frequencies",
        hint="RotaryEmbedding builds its tables with the default theta, not its own?",
    ),
    Mutant(
        "computed_in_input_dtype",
        WORK,
        "work = x.dtype",
        "frequencies",
        hint="angles computed in the input's dtype (bfloat16) instead of float32?",
    ),
    # gradients
    Mutant(
        "detached_input",
        "xw = x.to(work)",
        "xw = x.detach().to(work)",
        "gradients",
        hint="x detached before the rotation: no gradient reaches it?",
    ),
    # edge cases
    Mutant(
        "odd_head_dim_accepted",
        'raise ValueError(f"head_dim must be even, got {head_dim}")',
        "pass",
        "edge cases",
        hint="an odd head_dim is not rejected with ValueError?",
    ),
    Mutant(
        "module_rotates_q_in_place",
        Q_ROT,
        "q_rot = q.copy_(rotate(q.float(), cos, sin))",
        "edge cases",
        hint="RotaryEmbedding writes the rotated q into q in place?",
    ),
    Mutant(
        "cache_one_short",
        CACHE,
        "cos, sin = rope_cos_sin(head_dim, torch.arange(max_position - 1), theta)",
        "edge cases",
        hint="RotaryEmbedding's tables stop at max_position - 2 (arange(max_position - 1))?",
    ),
    Mutant(
        "rows_flattened_with_view",
        ROTATE_HALF,
        "rows = x.view(-1, x.shape[-1])  # one row per vector\n"
        "    rotated_half = torch.cat((-rows[:, half:], rows[:, :half]), dim=-1).view(x.shape)",
        "edge cases",
        hint="x flattened to rows with .view(-1, D), which fails on non-contiguous inputs "
        "(reshape works)?",
    ),
    # from scratch
    Mutant(
        "module_uses_onnx_rope",
        Q_ROT,
        "half = q.shape[-1] // 2\n"
        "        q_rot = torch.onnx.ops.rotary_embedding(\n"
        "            q, self.cos_cached[:, :half], self.sin_cached[:, :half],\n"
        "            positions.expand(q.shape[0], -1),\n"
        "        )",
        "from scratch",
        hint="torch.onnx.ops.rotary_embedding (torch's ONNX RoPE op) used for q?",
    ),
]

APPLY_ROPE = '''def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """x (..., T, D) rotated at `positions` ((T,) or (B, T)); same shape and dtype."""
    # BEGIN SOLUTION implement apply_rope
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = rope_cos_sin(x.shape[-1], positions, theta, dtype=work)
    xw = x.to(work)
    return rotate(xw, cos, sin).to(x.dtype)'''

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    Variant(
        "exp_log_frequencies",
        INV_FREQ,
        "inv_freq = torch.exp(-math.log(theta) * torch.arange(0, head_dim, 2, dtype=dtype) / head_dim)",
    ),
    Variant(
        "explicit_pair_formula",
        f"{ROTATE_HALF}\n    {ROTATION}",
        "c, s = cos[..., :half], sin[..., :half]\n"
        "    x1, x2 = x[..., :half], x[..., half:]\n"
        "    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)",
    ),
    Variant(
        "own_rotary_embedding_helper",  # a helper named like torch's: no false alarm
        APPLY_ROPE,
        "def rotary_embedding(x, cos, sin):\n"
        '    """The notebook\'s own helper, named like torch.onnx.ops.rotary_embedding."""\n'
        "    return rotate(x, cos, sin)\n\n\n"
        + APPLY_ROPE.replace("return rotate(", "return rotary_embedding("),
    ),
    Variant(
        "tables_in_float64",
        CACHE,
        "cos, sin = (\n"
        "            t.float()\n"
        "            for t in rope_cos_sin(\n"
        "                head_dim, torch.arange(max_position), theta, dtype=torch.float64\n"
        "            )\n"
        "        )",
    ),
]
