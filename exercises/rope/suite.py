"""Hidden suite for `rope`: rotary position embeddings in the half-split ("rotate_half", HF
Llama / GPT-NeoX) convention, with explicit, offset and per-sample positions, and a module
that caches the cos/sin tables.

The reference is the closed form, computed here in float64 (`reference`). The invariants
(position 0, norms, relative positions) come first: they hold for every rotation, the
interleaved and the reversed ones included, so only the reference (level "values") pins
the pairing and the direction, and its messages say when an answer is one of those.
Float32 tolerances grow with the largest position and the largest |x| (`atol_for`), as
the notebook states.

One bug, one place: dtypes are checked by the "shapes" tests alone (elsewhere an answer is
compared at the less precise of its dtype and the input's); after "positions", positions
are 0..T-1 unless the test is about them (the frequencies need long ones); the module's
tests after "values" call it with k = q and compare q_rot (the tables it looks up, not its
pairing of outputs, which "shapes" and "values" check).
"""

import torch

from grader.core.outcomes import CandidateRaised
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.checks import Failed
from grader.suite.exercise import Exercise, Watch

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
THETA, LLAMA3 = 10000.0, 500000.0

exercise = Exercise(
    id="rope",
    tags=("attention", "positional"),
    minutes=35,
    title="Rotary position embeddings (half-split, explicit positions)",
    seed="-",
    levels=[
        "shapes",
        "rotation",
        "values",
        "positions",
        "frequencies",
        "gradients",
        "edge cases",
        "from scratch",
    ],
    defines=("rope_cos_sin", "apply_rope", "RotaryEmbedding"),
    # torch 2.13 ships one RoPE: the ONNX op (torch.onnx.ops.rotary_embedding, which calls
    # torch.ops.onnx.RotaryEmbedding.opset23); half-split by default
    forbidden=("rotary_embedding", "rotary_embedding_23", "RotaryEmbedding"),
    watch=Watch(
        what="RoPE",
        functions=("RotaryEmbedding.opset23", "rotary_embedding", "rotary_embedding_23"),
        ops=("RotaryEmbedding",),
        private=r"rotary|rope",
    ),
)

B, H, T, D = 2, 3, 5, 8  # H != T: cos/sin broadcast over the wrong axis fails
HQ, HKV = 4, 2  # the module's q and k head counts differ


# --- the reference (grader's process, float64) -------------------------------------------


def reference_cos_sin(d, positions, theta=THETA):
    """cos, sin of shape (*positions.shape, d), angles [a_0 .. a_{d/2-1}] twice, float64."""
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=F64) / d)
    angles = positions.to(F64)[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def reference(x, positions, theta=THETA, pairing="half-split"):
    """x rotated at `positions` in float64 (differentiable in x). `pairing`: the pinned
    "half-split", or the conventions messages name: "interleaved", "reversed"."""
    d, half = x.shape[-1], x.shape[-1] // 2
    cos, sin = reference_cos_sin(d, positions, theta)
    if positions.dim() == 2:
        shape = (cos.shape[0], *[1] * (x.dim() - 3), *cos.shape[1:])
        cos, sin = cos.reshape(shape), sin.reshape(shape)
    x = x.to(F64)
    if pairing == "interleaved":
        c, s, x1, x2 = cos[..., :half], sin[..., :half], x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    sign = -1.0 if pairing == "reversed" else 1.0
    rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sign
    return x * cos + rotated_half * sin


OTHER_CONVENTIONS = {
    "interleaved": "the interleaved-pairs rotation (x[2i] with x[2i+1]: RoFormer, Meta, "
    "GPT-J), not the half-split one pinned here (x[i] with x[i + d/2])",
    "reversed": "the rotation by -angle (clockwise: rotate_half's sign flipped), not the "
    "pinned x * cos + cat(-x2, x1) * sin",
}


def atol_for(positions, x=None):
    """The float32 (and bfloat16) atol the notebook states: 1e-5 + 3e-7 * P * M."""
    largest = float(x.detach().abs().max()) if x is not None else 1.0
    return 1e-5 + 3e-7 * int(positions.max()) * largest


def agree(got, want, atol):
    tol = checks.tolerance(got.dtype, want.dtype, atol=atol)
    return bool((checks.tolerance_ratio(got, want, tol) <= 1).all())


def expect_rotation(got, x, positions, what, theta=THETA):
    """`got` is x rotated at `positions` (the pinned reference, at the dtype's tolerance);
    an answer that is another known rotation fails saying which one."""
    want = reference(x, positions, theta)
    got = checks.tensor(got, what, want.shape)
    atol = None if x.dtype == F64 and got.dtype == F64 else atol_for(positions, x)
    if bool(torch.isfinite(got).all()) and not agree(got, want, atol):
        for pairing, says in OTHER_CONVENTIONS.items():
            if agree(got, reference(x, positions, theta, pairing), atol):
                raise Failed(f"{what} is {says}")
    checks.close(got, want, what, atol=atol)


def expect_cos_sin(answer, d, positions, what, theta=THETA, dtype=F32):
    """rope_cos_sin's answer (asked for in `dtype`): a pair matching the reference."""
    cos, sin = checks.pair(answer, what)
    want_cos, want_sin = reference_cos_sin(d, positions, theta)
    for name, got, want in (("cos", cos, want_cos), ("sin", sin, want_sin)):
        got = checks.tensor(got, f"{what} {name}", want.shape)
        atol = None if dtype == F64 and got.dtype == F64 else atol_for(positions)
        checks.close(got, want, f"{what} {name}", atol=atol)


def module_pair(answer, q, k, what, *, dtype=False):
    """RotaryEmbedding.forward's answer: (q_rot, k_rot) with q's and k's shapes (and their
    dtypes, when `dtype`)."""
    q_rot, k_rot = checks.pair(answer, what)
    for name, got, like in (("q_rot", q_rot, q), ("k_rot", k_rot, k)):
        checks.tensor(got, f"{what} {name}", like.shape)
        if dtype and got.dtype != like.dtype:
            raise Failed(f"{what} {name} has dtype {got.dtype}, want {like.dtype}")
    return q_rot, k_rot


def expect_module(answer, q, k, positions, what, theta=THETA):
    q_rot, k_rot = module_pair(answer, q, k, what)
    expect_rotation(q_rot, q, positions, f"{what} q_rot", theta)
    expect_rotation(k_rot, k, positions, f"{what} k_rot", theta)


def expect_module_q(answer, q, positions, what, theta=THETA):
    """The module called with k = q (the same shape and values): q_rot is q rotated at
    `positions`, and k_rot has k's shape (its values are "values"' business)."""
    q_rot, _ = module_pair(answer, q, q, what)
    expect_rotation(q_rot, q, positions, f"{what} q_rot", theta)


def dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def q_only(t=T, d=16, seed=30, dtype=F32):
    """q (B, Hq, t, d) for the module's calls with k = q."""
    return lib.randn(B, HQ, t, d, seed=seed, dtype=dtype)


def qk(t=T, d=16, seed=30, dtype=F32):
    return lib.randn(B, HQ, t, d, seed=seed, dtype=dtype), lib.randn(
        B, HKV, t, d, seed=seed + 1, dtype=dtype
    )


def per_sample(*rows):
    return torch.tensor(rows, dtype=torch.int64)


def arange(start, stop=None):
    return torch.arange(start, stop) if stop is not None else torch.arange(start)


# --- shapes -------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def cos_sin_shapes(kernel):
    """rope_cos_sin: (T,) positions give (T, D) cos and sin; (B, T) give (B, T, D); in the
    dtype asked for (float32 by default)."""
    calls = [
        ((D, arange(T)), {}),
        ((D, per_sample([0, 1, 2, 3, 4], [7, 8, 9, 10, 11])), {}),
        ((D, arange(T)), {"dtype": F64}),
    ]
    answers = kernel.many(kernel.get("rope_cos_sin"), calls)
    for (args, kwargs), answer in zip(calls, answers, strict=True):
        dtype = kwargs.get("dtype", F32)
        what = f"rope_cos_sin({D}, positions {tuple(args[1].shape)}, dtype={dtype})"
        cos, sin = checks.pair(answer, what)
        for name, got in (("cos", cos), ("sin", sin)):
            checks.tensor(got, f"{what} {name}", (*args[1].shape, D))
            if got.dtype != dtype:
                raise Failed(f"{what} {name} has dtype {got.dtype}, want {dtype}")


@exercise.check("shapes", hidden=False)
def apply_rope_keeps_shape_and_dtype(kernel):
    """apply_rope on (B, H, T, D) in float32, float64 and bfloat16, and on (T, D): the
    input's shape and dtype."""
    inputs = [lib.randn(B, H, T, D, seed=1, dtype=dtype) for dtype in (F32, F64, BF16)]
    inputs.append(lib.randn(T, D, seed=2))
    answers = kernel.many(kernel.get("apply_rope"), [((x, arange(T)), {}) for x in inputs])
    for x, got in zip(inputs, answers, strict=True):
        what = f"apply_rope(x {tuple(x.shape)} {x.dtype})"
        checks.tensor(got, what, x.shape)
        if got.dtype != x.dtype:
            raise Failed(f"{what} has dtype {got.dtype}, want {x.dtype} (the input's)")


@exercise.check("shapes")
def per_sample_positions_broadcast_over_heads(kernel):
    """(B, T) positions: x (B, H, T, D) with H != T keeps its shape, and so does x (B, T, D)."""
    positions = per_sample([0, 1, 2, 3, 4], [9, 10, 11, 12, 13])
    inputs = [lib.randn(B, H, T, D, seed=3), lib.randn(B, T, D, seed=4)]
    answers = kernel.many(kernel.get("apply_rope"), [((x, positions), {}) for x in inputs])
    for x, got in zip(inputs, answers, strict=True):
        checks.tensor(got, f"apply_rope(x {tuple(x.shape)}, positions (B, T))", x.shape)


@exercise.check("shapes")
def module_returns_q_and_k(kernel):
    """RotaryEmbedding(16, 64)(q, k, positions) with Hq = 4, Hkv = 2: (q_rot, k_rot) in q's
    and k's shapes and dtypes, for (T,) and (B, T) positions."""
    rope = kernel.new("RotaryEmbedding", 16, 64)
    q, k = qk()
    for positions in (arange(T), per_sample([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])):
        what = f"RotaryEmbedding.forward(q, k, positions {tuple(positions.shape)})"
        module_pair(rope(q, k, positions), q, k, what, dtype=True)


# --- rotation (invariants: true of every rotation, whatever its pairing) ------------------


@exercise.check("rotation", hidden=False)
def position_zero_is_the_identity(kernel):
    """At position 0, cos is 1 and sin is 0, and apply_rope leaves x unchanged."""
    cos, sin = checks.pair(kernel.get("rope_cos_sin")(D, arange(T), dtype=F64), "rope_cos_sin")
    cos0 = checks.tensor(cos, "rope_cos_sin cos", (T, D))[0]
    sin0 = checks.tensor(sin, "rope_cos_sin sin", (T, D))[0]
    one, zero = torch.ones(D, dtype=F64), torch.zeros(D, dtype=F64)
    if agree(cos0, zero, None) and agree(sin0, one, None):
        raise Failed("rope_cos_sin at position 0: cos is 0 and sin is 1, want cos 1 and sin 0")
    checks.close(cos0, one, "rope_cos_sin cos at position 0")
    checks.close(sin0, zero, "rope_cos_sin sin at position 0")
    x = lib.randn(B, H, T, D, seed=5, dtype=F64)
    got = checks.tensor(kernel.get("apply_rope")(x, arange(T)), "apply_rope(x)", x.shape)
    checks.close(got[..., 0, :], x[..., 0, :], "apply_rope(x) at position 0 vs x")


@exercise.check("rotation")
def rotation_keeps_norms(kernel):
    """Each rotated vector keeps its length (float64, positions 0, 5, .., 30)."""
    x = lib.randn(B, H, 7, 16, seed=6, dtype=F64)
    got = checks.tensor(kernel.get("apply_rope")(x, arange(7) * 5), "apply_rope(x)", x.shape)
    checks.close(got.norm(dim=-1), x.norm(dim=-1), "norms of apply_rope(x) vs norms of x")


@exercise.check("rotation")
def scores_depend_only_on_the_offset(kernel):
    """<R_m q, R_n k> depends only on m - n: one q and one k at every position give a
    Toeplitz score matrix, and shifting every position by 50 changes no score."""
    q = lib.randn(1, 16, seed=7, dtype=F64).expand(6, 16).contiguous()
    k = lib.randn(1, 16, seed=8, dtype=F64).expand(6, 16).contiguous()
    calls: list[tuple[tuple, dict]] = [((v, arange(6) + s), {}) for s in (0, 50) for v in (q, k)]
    rq, rk, sq, sk = (  # in float64 (the inputs'), whatever dtype each answer has
        checks.tensor(a, "apply_rope(x)", (6, 16)).double()
        for a in kernel.many(kernel.get("apply_rope"), calls)
    )
    scores = rq @ rk.T
    checks.close(scores[1:, 1:], scores[:-1, :-1], "scores[m + 1, n + 1] vs scores[m, n]")
    checks.close(sq @ sk.T, scores, "scores at positions shifted by 50 vs unshifted")


# --- values (the pinned reference) --------------------------------------------------------


@exercise.check("values", points=2)
def cos_sin_match_reference(kernel):
    """rope_cos_sin(16, 0..11) in float64 and float32: cos and sin of p * theta^(-2i/d),
    laid out [a_0 .. a_7, a_0 .. a_7]."""
    positions = arange(12)
    calls = [((16, positions), {"dtype": F64}), ((16, positions), {})]
    answers = kernel.many(kernel.get("rope_cos_sin"), calls)
    expect_cos_sin(answers[0], 16, positions, "rope_cos_sin(16, 0..11, float64)", dtype=F64)
    expect_cos_sin(answers[1], 16, positions, "rope_cos_sin(16, 0..11)", dtype=F32)


@exercise.check("values", points=2, hidden=False)
def apply_rope_matches_reference(kernel):
    """apply_rope(x, 0..11), x (2, 3, 12, 16) float64: the half-split rotation."""
    x = lib.randn(B, H, 12, 16, seed=9, dtype=F64)
    got = kernel.get("apply_rope")(x, arange(12))
    expect_rotation(got, x, arange(12), "apply_rope(x float64, 0..11)")


@exercise.check("values")
def apply_rope_matches_reference_in_float32(kernel):
    """The same in float32 (atol 1e-5 + 3e-7 * P * M)."""
    x = lib.randn(B, H, 12, 16, seed=9)
    got = kernel.get("apply_rope")(x, arange(12))
    expect_rotation(got, x, arange(12), "apply_rope(x float32, 0..11)")


@exercise.check("values", points=2)
def module_matches_reference(kernel):
    """RotaryEmbedding(16, 64)(q, k, 0..11) in float32: both q and k rotated."""
    q, k = qk(12)
    rope = kernel.new("RotaryEmbedding", 16, 64)
    expect_module(rope(q, k, arange(12)), q, k, arange(12), "RotaryEmbedding(q, k, 0..11)")


# --- positions ----------------------------------------------------------------------------


@exercise.check("positions", points=2, hidden=False)
def explicit_positions(kernel):
    """Positions in any order, repeated: [7, 0, 3, 3, 12, 1] (float64)."""
    positions = torch.tensor([7, 0, 3, 3, 12, 1])
    x = lib.randn(B, H, 6, 16, seed=10, dtype=F64)
    got = kernel.get("apply_rope")(x, positions)
    expect_rotation(got, x, positions, "apply_rope(x, [7, 0, 3, 3, 12, 1])")


@exercise.check("positions", points=2)
def offset_positions(kernel):
    """A chunk after 100 cached tokens (positions 100..105), and one decoded token at 37."""
    cases = [
        (lib.randn(B, H, 6, 16, seed=11, dtype=F64), arange(100, 106), "100..105"),
        (lib.randn(B, H, 1, 16, seed=12, dtype=F64), torch.tensor([37]), "[37]"),
    ]
    answers = kernel.many(kernel.get("apply_rope"), [((x, p), {}) for x, p, _ in cases])
    for (x, positions, name), got in zip(cases, answers, strict=True):
        expect_rotation(got, x, positions, f"apply_rope(x, {name})")


@exercise.check("positions", points=2)
def per_sample_positions(kernel):
    """(B, T) positions, one row per sample, shared by the heads: x (B, H, T, D) and
    x (B, T, D), and one decode step (B = T = 1, positions [[12]]) (float64)."""
    cases = [
        (lib.randn(B, H, 5, 16, seed=13, dtype=F64), per_sample([0, 1, 2, 3, 4], [9, 10, 11, 12, 13])),
        (lib.randn(B, 5, 16, seed=14, dtype=F64), per_sample([3, 1, 4, 1, 5], [20, 21, 22, 23, 24])),
        (lib.randn(1, H, 1, 16, seed=25, dtype=F64), per_sample([12])),
    ]  # fmt: skip
    answers = kernel.many(kernel.get("apply_rope"), [((x, p), {}) for x, p in cases])
    for (x, positions), got in zip(cases, answers, strict=True):
        expect_rotation(got, x, positions, f"apply_rope(x {tuple(x.shape)}, (B, T) positions)")


@exercise.check("positions", points=2)
def module_at_explicit_positions(kernel):
    """RotaryEmbedding looks its tables up at the positions given: 40..44, per sample, and
    up to 8191 in a module of 8200 positions (k = q)."""
    q = q_only(seed=32)
    cases = [(64, arange(40, 45)), (64, per_sample([40, 41, 42, 43, 44], [3, 9, 27, 50, 61])),
             (8200, torch.tensor([8191, 0, 4095, 17, 8000]))]  # fmt: skip
    for size, positions in cases:
        rope = kernel.new("RotaryEmbedding", 16, size)
        what = f"RotaryEmbedding(16, {size})(q, k, positions {positions.tolist()})"
        expect_module_q(rope(q, q, positions), q, positions, what)


@exercise.check("positions")
def module_called_again_at_other_positions(kernel):
    """One RotaryEmbedding called at 40..44, then 0..4, then [[7, 3, 9], [60, 61, 62]], then
    40..44 again: each call uses its own positions, nothing kept from the calls before."""
    rope = kernel.new("RotaryEmbedding", 16, 64)
    calls = [(q_only(seed=33 + i, t=len(p[-1]) if p.dim() == 2 else len(p)), p) for i, p in enumerate(
        [arange(40, 45), arange(5), per_sample([7, 3, 9], [60, 61, 62]), arange(40, 45)])]  # fmt: skip
    for number, (q, positions) in enumerate(calls, start=1):
        what = f"RotaryEmbedding call {number} (positions {positions.tolist()})"
        expect_module_q(rope(q, q, positions), q, positions, what)


# --- frequencies --------------------------------------------------------------------------

LONG = torch.tensor([0, 1, 17, 1000, 4095, 8191])  # the slowest pairs need long positions


@exercise.check("frequencies", points=2)
def cos_sin_theta_and_head_dims(kernel):
    """rope_cos_sin with theta 500000 and 10000, head_dim 2, 64 and 128, positions up to
    8191 (float64)."""
    cases = [(d, theta) for d in (2, 64, 128) for theta in (LLAMA3, THETA)]
    calls = [((d, LONG, theta), {"dtype": F64}) for d, theta in cases]
    answers = kernel.many(kernel.get("rope_cos_sin"), calls)
    for (d, theta), answer in zip(cases, answers, strict=True):
        what = f"rope_cos_sin({d}, positions up to 8191, theta={theta:g})"
        expect_cos_sin(answer, d, LONG, what, theta, dtype=F64)


@exercise.check("frequencies", points=2)
def apply_rope_theta_and_head_dims(kernel):
    """apply_rope with theta=500000 on head_dim 2, 64 and 128 (float64, positions up to
    8191)."""
    inputs = [lib.randn(3, 6, 2, seed=15, dtype=F64)]
    inputs += [lib.randn(1, 2, 6, d, seed=16, dtype=F64) for d in (64, 128)]
    calls: list[tuple[tuple, dict]] = [((x, LONG, LLAMA3), {}) for x in inputs]
    answers = kernel.many(kernel.get("apply_rope"), calls)
    for x, got in zip(inputs, answers, strict=True):
        what = f"apply_rope(x {tuple(x.shape)}, positions up to 8191, theta=500000)"
        expect_rotation(got, x, LONG, what, LLAMA3)


@exercise.check("frequencies", points=2)
def long_positions_in_float32(kernel):
    """float32, head_dim 128, positions up to 8191, theta 10000 and 500000, within
    atol 1e-5 + 3e-7 * P * M."""
    x = lib.randn(1, 2, 6, 128, seed=17)
    calls: list[tuple[tuple, dict]] = [((x, LONG, theta), {}) for theta in (THETA, LLAMA3)]
    answers = kernel.many(kernel.get("apply_rope"), calls)
    for theta, got in zip((THETA, LLAMA3), answers, strict=True):
        what = f"apply_rope(x float32, positions up to 8191, theta={theta:g})"
        expect_rotation(got, x, LONG, what, theta)


@exercise.check("frequencies", points=2)
def bfloat16_is_computed_in_float32(kernel):
    """bfloat16 input, positions up to 8191: angles and rotation in float32, cast back
    (rtol 1.6e-2, atol 1e-5 + 3e-7 * P * M)."""
    x = lib.randn(1, 2, 6, 64, seed=18, dtype=BF16)
    got = kernel.get("apply_rope")(x, LONG)
    expect_rotation(got, x, LONG, "apply_rope(x bfloat16, positions up to 8191)")


@exercise.check("frequencies")
def module_theta(kernel):
    """RotaryEmbedding(64, 64, theta=500000) at positions 0..5 (float32, k = q)."""
    rope = kernel.new("RotaryEmbedding", 64, 64, theta=LLAMA3)
    q = q_only(6, 64, seed=34)
    what = "RotaryEmbedding(64, 64, theta=500000)(q, k, 0..5)"
    expect_module_q(rope(q, q, arange(6)), q, arange(6), what, LLAMA3)


# --- gradients ----------------------------------------------------------------------------


@exercise.check("gradients", points=2)
def gradient_matches_autograd(kernel):
    """d(sum(apply_rope(x) * r))/dx matches autograd's (the inverse rotation of r), float64,
    positions 0..4."""
    x, positions = lib.randn(B, H, 5, 16, seed=19, dtype=F64), arange(5)
    what = "apply_rope(x, 0..4)"
    lib.gradients_match(kernel, kernel.get("apply_rope"), (x, positions), reference, [0], what,
                        names=["x"])  # fmt: skip


# --- edge cases ---------------------------------------------------------------------------


@exercise.check("edge cases")
def odd_head_dim_raises(kernel):
    """An odd head dimension raises ValueError, in rope_cos_sin and in apply_rope."""
    calls = [
        ("rope_cos_sin(7, positions)", kernel.get("rope_cos_sin"), (7, arange(3))),
        ("apply_rope(x with D = 7)", kernel.get("apply_rope"), (lib.randn(2, 3, 7, seed=20), arange(3))),
    ]  # fmt: skip
    for what, call, args in calls:
        lib.raises(call, args, "ValueError", what)


@exercise.check("edge cases")
def inputs_are_not_modified(kernel):
    """apply_rope (float32 and bfloat16 x with (T,) positions, float64 x with (B, T) ones) and
    RotaryEmbedding.forward leave x, q, k and the positions as they were."""
    calls = [
        ("apply_rope", [("x", lib.randn(B, H, T, 16, seed=21)), ("positions", arange(T))]),
        ("apply_rope", [("x", lib.randn(B, H, T, 16, seed=22, dtype=BF16)), ("positions", arange(T))]),
        ("apply_rope", [("x", lib.randn(B, H, T, 16, seed=23, dtype=F64)),
                        ("positions", per_sample([0, 1, 2, 3, 4], [5, 6, 7, 8, 9]))]),
        ("RotaryEmbedding", [("q", qk(seed=36)[0]), ("k", qk(seed=36)[1]), ("positions", arange(T))]),
    ]  # fmt: skip
    for function, tensors in calls:
        held = [kernel.hold(t.clone(), name) for name, t in tensors]
        target = (
            kernel.new(function, 16, 64) if function == "RotaryEmbedding" else kernel.get(function)
        )
        try:
            target(*held)
        except CandidateRaised as error:  # a wrong answer is another test's: the inputs are ours
            if error.not_implemented or error.interface:
                raise
        shown = f"{function}({', '.join(f'{n} {dtype_name(t)}' for n, t in tensors)})"
        for (name, original), remote in zip(tensors, held, strict=True):
            checks.equal(kernel.attribute(remote, "data"), original, f"{name} after {shown}")


@exercise.check("edge cases")
def non_contiguous_inputs(kernel):
    """x, q and k in a non-contiguous layout (axes stored in reverse, the last strided)."""
    x, positions = lib.noncontiguous(lib.randn(B, H, 6, 16, seed=22, dtype=F64)), arange(6)
    expect_rotation(
        kernel.get("apply_rope")(x, positions), x, positions, "apply_rope(x non-contiguous)"
    )
    q = lib.noncontiguous(q_only(6, seed=23))
    rope = kernel.new("RotaryEmbedding", 16, 64)
    expect_module_q(rope(q, q, positions), q, positions, "RotaryEmbedding(q non-contiguous, k = q)")


@exercise.check("edge cases")
def last_cached_position(kernel):
    """RotaryEmbedding(16, 32) covers positions 0..31: T = 32 at 0..31 works (k = q)."""
    rope = kernel.new("RotaryEmbedding", 16, 32)
    q, positions = q_only(32, seed=38), arange(32)
    expect_module_q(rope(q, q, positions), q, positions, "RotaryEmbedding(16, 32) at 0..31")


# --- from scratch -------------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_rope(kernel):
    """The notebook neither names nor runs torch's RoPE (torch.onnx.ops.rotary_embedding)."""
    q, k = qk(seed=40)

    def run():
        kernel.get("apply_rope")(lib.randn(B, H, T, 16, seed=26), arange(T))
        kernel.new("RotaryEmbedding", 16, 64)(q, k, arange(T))

    lib.no_builtin(kernel, exercise, run)
