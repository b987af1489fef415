"""Hidden suite for `gqa`: grouped-query attention (query head h uses KV head h // (Hq // Hkv)),
as a function with bottom-right causal masking and bool or float masks, and as a module with
narrow key/value projections. MHA (Hkv = Hq) and MQA (Hkv = 1) are its degenerate cases.

The reference is `F.scaled_dot_product_attention(..., enable_gqa=True)` run here, in float64,
with the bottom-right causal mask passed explicitly (SDPA's own `is_causal` is top-left when
Tq != S). Shapes where `.repeat` and `.repeat_interleave` differ need Hkv >= 2 and a group
of at least 2: Hq = 8, Hkv = 2 (and 6, 3).

One bug, one place: a test about one feature calls with every other option at its default.
Every mask behaviour (causal, bool, float, fully masked rows) is tested at "masks" only; the
module's causal test compares with the notebook's own causal function, so a wrong mask is
not counted again there; gradients and edge cases call with no mask and the default scale.
"""

import dataclasses

import torch
from torch.nn import functional as F

from grader.core.outcomes import CandidateRaised
from grader.exercises import _attention as att
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise
from grader.suite.integrity import (
    require_clean_source,
    require_no_builtin_module,
    require_nothing_seen,
)

FUNCTION, MODULE = "grouped_query_attention", "GQASelfAttention"
FLEX = "flex_attention"

exercise = Exercise(
    id="gqa",
    tags=("attention", "inference"),
    minutes=45,
    title="Grouped- and multi-query attention (function and module), from scratch",
    seed="-",
    levels=[
        "shapes",
        "degenerate cases",
        "grouping",
        "masks",
        "module",
        "gradients",
        "edge cases",
        "from scratch",
    ],
    defines=(FUNCTION, MODULE),
    # torch's attention built-ins, and flex_attention (it takes enable_gqa too)
    forbidden=(*att.FORBIDDEN, FLEX),
    watch=dataclasses.replace(
        att.ATTENTION,
        functions=(*att.ATTENTION.functions, FLEX),
        instrument=(*att.ATTENTION.instrument, f"torch.nn.attention.flex_attention:{FLEX}"),
    ),
)

B, HQ, HKV, TQ, S, D, DV = 2, 8, 2, 3, 5, 4, 6  # Hq = 8, Hkv = 2: repeat != repeat_interleave
D_MODEL, HEADS, KV_HEADS, T = 24, 6, 2, 5  # the module: head_dim 4, groups of 3
KV_WIDTH = KV_HEADS * D_MODEL // HEADS  # the module's k and v projections' width
F32, F64 = lib.F32, lib.F64


def qkv(hq=HQ, hkv=HKV, *, b=B, tq=TQ, s=S, d=D, dv=DV, seed=0, scale=1.0, dtype=F32):
    """Seeded q [b, hq, tq, d], k [b, hkv, s, d], v [b, hkv, s, dv]."""
    return (
        lib.randn(b, hq, tq, d, seed=seed, scale=scale, dtype=dtype),
        lib.randn(b, hkv, s, d, seed=seed + 1, scale=scale, dtype=dtype),
        lib.randn(b, hkv, s, dv, seed=seed + 2, dtype=dtype),
    )


def bottom_right(tq: int, s: int) -> torch.Tensor:
    """[Tq, S] bool, True = may attend: key j <= query i + S - Tq."""
    return torch.ones(tq, s, dtype=torch.bool).tril(s - tq)


def reference(q, k, v, *, is_causal=False, attn_mask=None, scale=None):
    """SDPA with enable_gqa in float64 (a float64 input keeps its autograd graph), with the
    bottom-right causal mask passed explicitly."""
    q, k, v = (t.to(F64) for t in (q, k, v))
    if is_causal:
        attn_mask = bottom_right(q.shape[-2], k.shape[-2])
    elif attn_mask is not None and attn_mask.is_floating_point():
        attn_mask = attn_mask.to(F64)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, scale=scale, enable_gqa=True
    )


def attend(kernel, inputs, **kwargs):
    """The candidate's output for (q, k, v), its shape checked."""
    q, _, v = inputs
    y = kernel.get(FUNCTION)(*inputs, **kwargs)
    return checks.tensor(y, f"{FUNCTION}(q, k, v)", (*q.shape[:3], v.shape[-1]))


def matches(kernel, inputs, what, **kwargs):
    """The candidate's output for (q, k, v) matches the reference."""
    checks.close(attend(kernel, inputs, **kwargs), reference(*inputs, **kwargs), what)


def build(kernel, bias=False, dtype=F64):
    """The candidate's module (24 -> 6 query heads over 2 KV heads), eval mode, in `dtype`."""
    module = kernel.new(MODULE, D_MODEL, HEADS, KV_HEADS, bias=bias, seed=0)
    module.eval()
    module.to(dtype)
    return module


def weights(module, bias=False):
    """The module's four projections as float64 tensors (nn.Linear's shapes: k and v to
    the KV heads' width)."""
    width = {"q": D_MODEL, "k": KV_WIDTH, "v": KV_WIDTH, "o": D_MODEL}
    shapes: dict[str, tuple[int, ...]] = {
        f"{p}_proj.weight": (n, D_MODEL) for p, n in width.items()
    }
    shapes |= {f"{p}_proj.bias": (n,) for p, n in width.items()} if bias else {}
    state = lib.require_state(module.state_dict(), list(shapes), MODULE, shapes)
    return {n: t.to(F64) for n, t in state.items()}


def linear(state, name, inp):
    return F.linear(inp, state[f"{name}.weight"], state.get(f"{name}.bias"))


def project(state, x):
    """The module's q, k, v heads ([B, H, T, hd], contiguous), computed here from its
    weights."""
    b, t, _ = x.shape
    heads = [linear(state, f"{p}_proj", x).reshape(b, t, -1, D_MODEL // HEADS) for p in "qkv"]
    return tuple(h.transpose(1, 2).contiguous() for h in heads)


def merge(state, out):
    """Heads [B, H, T, hd] merged back in order, then o_proj."""
    b, _, t, _ = out.shape
    return linear(state, "o_proj", out.transpose(1, 2).reshape(b, t, -1))


def module_reference(state, x):
    """The module's output, computed here from its weights with the reference attention."""
    return merge(state, reference(*project(state, x)))


def module_output(module, x, **kwargs):
    return checks.tensor(module(x, **kwargs), f"{MODULE}.forward(x)", x.shape)


def x_in(dtype=F64, seed=11):
    return lib.randn(B, T, D_MODEL, seed=seed, dtype=dtype)


# --- shapes -------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def output_shape(kernel):
    """q [2, 8, 3, 4], k [2, 2, 5, 4], v [2, 2, 5, 6] give [2, 8, 3, 6] in q's dtype."""
    y = attend(kernel, qkv())
    assert y.dtype == F32, f"output dtype {y.dtype}, want torch.float32 (q's)"


@exercise.check("shapes")
def uneven_heads_raise(kernel):
    """6 query heads over 4 KV heads raise ValueError."""
    inputs = qkv(6, 4)
    lib.raises(kernel.get(FUNCTION), inputs, "ValueError", f"{FUNCTION} with Hq=6, Hkv=4")


@exercise.check("shapes")
def kv_head_counts_differ_raise(kernel):
    """k with 2 heads and v with 4 (Hq = 8) raise ValueError."""
    q, k, _ = qkv()
    v = lib.randn(B, 4, S, DV, seed=3)
    lib.raises(kernel.get(FUNCTION), (q, k, v), "ValueError", f"{FUNCTION} with Hk=2, Hv=4")


@exercise.check("shapes")
def causal_and_mask_together_raise(kernel):
    """is_causal=True with an attn_mask raises ValueError."""
    inputs, allow = qkv(), torch.ones(TQ, S, dtype=torch.bool)
    call = kernel.get(FUNCTION)
    lib.raises(
        lambda: call(*inputs, is_causal=True, attn_mask=allow),
        (),
        "ValueError",
        f"{FUNCTION}(is_causal=True, attn_mask=...)",
    )


@exercise.check("shapes", hidden=False)
def projection_shapes(kernel):
    """GQASelfAttention(24, 6, 2): q_proj/o_proj 24 x 24, k_proj/v_proj 8 x 24 (+ biases)."""
    for bias in (False, True):
        state = weights(build(kernel, bias), bias)
        hd = D_MODEL // HEADS
        want = {"q_proj": [HEADS * hd, D_MODEL], "k_proj": [KV_HEADS * hd, D_MODEL]}
        want |= {"v_proj": want["k_proj"], "o_proj": [D_MODEL, HEADS * hd]}
        shapes = {n: list(t.shape) for n, t in state.items() if n.endswith("weight")}
        checks.data(shapes, {f"{n}.weight": s for n, s in want.items()}, "weight shapes")
        if bias:
            biases = {n: list(t.shape) for n, t in state.items() if n.endswith("bias")}
            checks.data(biases, {f"{n}.bias": s[:1] for n, s in want.items()}, "bias shapes")


@exercise.check("shapes")
def module_rejects_uneven_heads(kernel):
    """GQASelfAttention(24, 6, 4) raises ValueError (4 does not divide 6)."""
    lib.raises(
        lambda: kernel.new(MODULE, D_MODEL, HEADS, 4), (), "ValueError", f"{MODULE}(24, 6, 4)"
    )


@exercise.check("shapes")
def module_rejects_d_model_not_divisible(kernel):
    """GQASelfAttention(26, 6, 2) raises ValueError (6 heads do not divide 26 channels)."""
    lib.raises(lambda: kernel.new(MODULE, 26, HEADS, KV_HEADS), (), "ValueError",
               f"{MODULE}(d_model=26, n_heads=6, n_kv_heads=2)")  # fmt: skip


# --- degenerate cases ---------------------------------------------------------------------


@exercise.check("degenerate cases", points=2, hidden=False)
def mha_when_kv_heads_equal_query_heads(kernel):
    """Hkv = Hq = 4: plain multi-head attention (float32 vs SDPA)."""
    matches(kernel, qkv(4, 4, seed=20), "MHA (Hq = Hkv = 4) vs SDPA")


@exercise.check("degenerate cases", points=2)
def mqa_when_one_kv_head(kernel):
    """Hkv = 1, Hq = 8: multi-query attention, every query head reads the one KV head."""
    matches(kernel, qkv(8, 1, seed=30), "MQA (Hq = 8, Hkv = 1) vs SDPA(enable_gqa=True)")


# --- grouping -----------------------------------------------------------------------------


@exercise.check("grouping", points=3, hidden=False)
def grouped_8_over_2(kernel):
    """Hq = 8, Hkv = 2: query head h reads KV head h // 4 (vs SDPA(enable_gqa=True))."""
    matches(kernel, qkv(seed=40), "Hq = 8, Hkv = 2 vs SDPA(enable_gqa=True)")


@exercise.check("grouping", points=2)
def grouped_6_over_3(kernel):
    """Hq = 6, Hkv = 3, batch of one: query head h reads KV head h // 2."""
    matches(kernel, qkv(6, 3, b=1, seed=50), "Hq = 6, Hkv = 3 vs SDPA(enable_gqa=True)")


@exercise.check("grouping")
def key_head_mapping(kernel):
    """Values shared by every KV head: only the keys' head mapping decides the output."""
    q, k, v = qkv(seed=60)
    v = v[:, :1].expand_as(v).contiguous()
    matches(kernel, (q, k, v), "keys' head mapping (values equal across KV heads)")


@exercise.check("grouping")
def value_head_mapping(kernel):
    """Keys shared by every KV head: only the values' head mapping decides the output."""
    q, k, v = qkv(seed=70)
    k = k[:, :1].expand_as(k).contiguous()
    matches(kernel, (q, k, v), "values' head mapping (keys equal across KV heads)")


@exercise.check("grouping")
def query_heads_are_independent(kernel):
    """Changing query head 1 changes output head 1 only (its group-mates stay put)."""
    q, k, v = qkv(seed=80)
    moved = q.clone()
    moved[:, 1] += lib.randn(B, TQ, D, seed=81, scale=2.0)
    first, second = kernel.many(kernel.get(FUNCTION), [((q, k, v), {}), ((moved, k, v), {})])
    for y in (first, second):
        checks.tensor(y, f"{FUNCTION}(q, k, v)", (B, HQ, TQ, DV))
    others = [h for h in range(HQ) if h != 1]
    checks.same(second[:, others], first[:, others], "other heads after changing query head 1")
    checks.differ(second[:, 1], first[:, 1], "output head 1 after changing query head 1")


@exercise.check("grouping")
def explicit_scale(kernel):
    """scale=0.3 replaces 1/sqrt(D)."""
    matches(kernel, qkv(seed=90), "scale=0.3 vs SDPA(scale=0.3)", scale=0.3)


@exercise.check("grouping")
def scale_zero_is_used(kernel):
    """scale=0.0 is used as given, not taken for None: every key weighs the same, so each
    query head outputs the mean of its KV head's values."""
    matches(kernel, qkv(seed=95), "scale=0.0 vs SDPA(scale=0.0)", scale=0.0)


# --- masks --------------------------------------------------------------------------------


@exercise.check("masks", points=2, hidden=False)
def causal_square(kernel):
    """is_causal=True with Tq = S = 5: the lower triangle."""
    matches(kernel, qkv(tq=5, seed=100), "causal, Tq = S = 5", is_causal=True)


@exercise.check("masks", points=2)
def causal_is_bottom_right(kernel):
    """is_causal=True with Tq = 3 < S = 7: query i sees keys j <= i + 4."""
    matches(kernel, qkv(s=7, seed=110), "causal, Tq = 3, S = 7 (bottom-right)", is_causal=True)


@exercise.check("masks")
def causal_decode_step(kernel):
    """B = 1, Tq = 1, S = 6, causal: the one query sees every key."""
    matches(kernel, qkv(b=1, tq=1, s=6, seed=180), "causal, Tq = 1, S = 6", is_causal=True)


@exercise.check("masks")
def causal_more_queries_than_keys(kernel):
    """Causal with Tq = 6 > S = 4: the first two queries see no key and output zeros."""
    matches(kernel, qkv(tq=6, s=4, seed=170), "causal, Tq = 6, S = 4", is_causal=True)


@exercise.check("masks", points=2)
def bool_mask_per_query_head(kernel):
    """A [B, Hq, Tq, S] bool mask (True = may attend), different for every query head."""
    allow = att.random_allow(B, HQ, TQ, S, seed=120)
    matches(kernel, qkv(seed=121), "[B, Hq, Tq, S] bool mask", attn_mask=allow)


@exercise.check("masks")
def padding_mask(kernel):
    """A [B, 1, 1, S] bool mask: sample 1's last two keys are padding."""
    allow = att.padding_allow([S, S - 2], S)
    matches(kernel, qkv(seed=130), "[B, 1, 1, S] padding mask", attn_mask=allow)


@exercise.check("masks", points=2)
def float_mask_is_added(kernel):
    """A [Tq, S] float mask with finite values and some -inf is added to the scores."""
    additive = lib.randn(TQ, S, seed=140, scale=2.0)
    additive[0, 2:] = float("-inf")
    additive[2, :2] = float("-inf")
    matches(kernel, qkv(seed=141), "[Tq, S] float mask", attn_mask=additive)


@exercise.check("masks", points=2)
def fully_masked_rows_are_zero(kernel):
    """A query whose keys are all masked (bool mask, or -inf float mask) outputs zeros."""
    inputs = qkv(seed=160)
    allow = torch.ones(TQ, S, dtype=torch.bool)
    allow[1] = False
    additive = torch.zeros(TQ, S)
    additive[2] = float("-inf")
    calls = [(inputs, {"attn_mask": allow}), (inputs, {"attn_mask": additive})]
    got = kernel.many(kernel.get(FUNCTION), calls)
    for y, (mask, row) in zip(got, [(allow, 1), (additive, 2)], strict=True):
        kind = "bool" if mask.dtype == torch.bool else "float"
        y = checks.tensor(y, f"{FUNCTION}(q, k, v, attn_mask)", (B, HQ, TQ, DV))
        checks.finite(y, f"output with a fully masked row ({kind} mask)")
        checks.close(y, reference(*inputs, attn_mask=mask), f"output, fully masked row {row}")


# --- module -------------------------------------------------------------------------------


@exercise.check("module")
def module_output_shape(kernel):
    """The module maps x [2, 5, 24] to [2, 5, 24]."""
    module_output(build(kernel), x_in())


@exercise.check("module", points=2)
def module_parity(kernel):
    """Same output as the reference built from the module's own weights (float64)."""
    module = build(kernel)
    x = x_in()
    checks.close(module_output(module, x), module_reference(weights(module), x), "module output")


@exercise.check("module", points=2)
def module_parity_with_bias(kernel):
    """Parity with bias=True."""
    module = build(kernel, bias=True)
    x = x_in(seed=12)
    want = module_reference(weights(module, bias=True), x)
    checks.close(module_output(module, x), want, "module output (bias=True)")


@exercise.check("module", points=2)
def module_passes_is_causal(kernel):
    """forward(x, is_causal=True) gives o_proj of the notebook's own
    grouped_query_attention(q, k, v, is_causal=True) on the module's heads (the causal mask
    itself is tested at "masks")."""
    module = build(kernel)
    state, x = weights(module), x_in(seed=13)
    want = merge(state, attend(kernel, project(state, x), is_causal=True).to(F64))
    checks.close(
        module_output(module, x, is_causal=True), want,
        "forward(x, is_causal=True) vs o_proj(grouped_query_attention(..., is_causal=True))",
    )  # fmt: skip


@exercise.check("module")
def o_proj_comes_last(kernel):
    """With o_proj's weight zeroed, the output is 0 at every position."""
    module = build(kernel)
    att.load(module, MODULE, {"o_proj.weight": torch.zeros(D_MODEL, D_MODEL, dtype=F64)})
    lib.exactly_zero(module_output(module, x_in(seed=14)), "output with o_proj.weight = 0")


# --- gradients ----------------------------------------------------------------------------

# Gradients are compared at 1e-6 (looser than float64's default): a detached tensor is off by
# O(1), while a float32 step inside (a precision bug, tested at "edge cases") moves them by
# about 1e-7 and is not counted again here.
GRAD_TOL = 1e-6


@exercise.check("gradients", points=2)
def gradients_wrt_q_k_v(kernel):
    """d(sum(y * r)) / d(q, k, v) match autograd through the reference (float64, no mask):
    each KV head's gradient sums over its query group."""
    inputs = qkv(s=7, seed=150, dtype=F64)
    leaves = [t.clone().requires_grad_() for t in inputs]
    y = reference(*leaves)
    r = lib.randn(*y.shape, seed=2, dtype=F64)
    (y * r).sum().backward()
    got = kernel.grad(kernel.get(FUNCTION), inputs, {}, wrt=[0, 1, 2], cotangent=r, params=False)
    for name, grad, leaf in zip("qkv", got["inputs"], leaves, strict=True):
        what = f"gradient of {FUNCTION} w.r.t. {name} vs autograd"
        checks.tensor(grad, what, leaf.shape)
        checks.close(grad, leaf.grad, what, rtol=GRAD_TOL, atol=GRAD_TOL)


@exercise.check("gradients", points=2)
def module_weight_gradients(kernel):
    """Gradients of the module's four weights and of x match autograd (float64)."""
    module = build(kernel)
    state = {n: t.clone().requires_grad_() for n, t in weights(module).items()}
    x = x_in(seed=15).requires_grad_()
    y = module_reference(state, x)
    r = lib.randn(*y.shape, seed=16, dtype=F64)
    (y * r).sum().backward()
    got = kernel.grad(module, (x.detach(),), {}, wrt=[0], cotangent=r)
    grad_x = checks.tensor(got["inputs"][0], "gradient of x", x.shape)
    checks.close(grad_x, x.grad, "gradient of x", rtol=GRAD_TOL, atol=GRAD_TOL)
    for name, leaf in state.items():
        grad = got["params"].get(name)
        checks.tensor(grad, f"gradient of {name}", leaf.shape)
        checks.close(grad, leaf.grad, f"gradient of {name}", rtol=GRAD_TOL, atol=GRAD_TOL)


# --- edge cases ---------------------------------------------------------------------------


@exercise.check("edge cases", points=2)
def float64_keeps_its_precision(kernel):
    """float64 keys near 50 (a large part shared by every key, small differences: scores
    in the hundreds that differ by ~1) give a float64 output within float64's tolerance:
    a float32 step inside rounds the scores by ~1e-5."""
    q, k, v = qkv(seed=190, dtype=F64)
    inputs = (q, k + 50.0, v)
    y = attend(kernel, inputs)
    assert y.dtype == F64, f"output dtype {y.dtype} for float64 inputs, want torch.float64"
    checks.close(y, reference(*inputs), "float64 output for keys near 50")


@exercise.check("edge cases")
def non_contiguous_inputs(kernel):
    """Non-contiguous q, k and v (column-major, strided: `.view` that merges axes fails on
    them) give the same result."""
    inputs = qkv(seed=200)
    strided = tuple(map(lib.noncontiguous, inputs))
    checks.close(attend(kernel, strided), reference(*inputs), "output for non-contiguous inputs")


@exercise.check("edge cases")
def large_scores_stay_finite(kernel):
    """Scores in the thousands (float64) give the reference's output, no overflow."""
    inputs = qkv(seed=210, scale=40.0, dtype=F64)
    y = attend(kernel, inputs)
    checks.finite(y, "output for scores in the thousands")
    checks.close(y, reference(*inputs), "output for scores in the thousands")


@exercise.check("edge cases")
def inputs_left_unchanged(kernel):
    """q, k, v and attn_mask are left unchanged, under every option that takes its own path:
    the defaults, is_causal=True, a bool mask, a float mask, scale=0.3 (what each call
    returns is tested elsewhere; here only the inputs after it)."""
    inputs = qkv(seed=220)
    allow = att.random_allow(TQ, S, seed=221)
    additive = lib.randn(TQ, S, seed=222)
    held = {name: kernel.hold(t, name) for name, t in zip("qkv", inputs, strict=True)}
    held |= {
        "bool attn_mask": kernel.hold(allow, "allow"),
        "float attn_mask": kernel.hold(additive, "additive"),
    }
    values = dict(zip(held, (*inputs, allow, additive), strict=True))
    settings = {
        "the defaults": {},
        "is_causal=True": {"is_causal": True},
        "a bool attn_mask": {"attn_mask": held["bool attn_mask"]},
        "a float attn_mask": {"attn_mask": held["float attn_mask"]},
        "scale=0.3": {"scale": 0.3},
    }
    call = kernel.get(FUNCTION)
    for setting, options in settings.items():
        try:
            call(held["q"], held["k"], held["v"], **options)
        except CandidateRaised as error:  # a bug of that option's own, tested elsewhere
            if error.not_implemented or error.interface:
                raise
        for name, remote in held.items():
            after = kernel.attribute(remote, "data")
            checks.equal(after, values[name], f"{name} after a call with {setting}")


# --- from scratch -------------------------------------------------------------------------


def run_everything(kernel):
    """Build the module and call the function with its defaults (the watch has seen every
    call the other tests made: this call is there so that a stub answers first)."""
    module = build(kernel)
    attend(kernel, qkv())
    return module


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code names none of torch's attention built-ins."""
    run_everything(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in runs, and the module holds no nn.MultiheadAttention."""
    module = run_everything(kernel)
    require_nothing_seen(kernel.seen)
    require_no_builtin_module(kernel.modules(module), MODULE, exercise.watch)
