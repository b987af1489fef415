"""Hidden suite for `moe`: a top-k mixture-of-experts layer with Mixtral's routing
(softmax over every expert, the top k, renormalised), the Switch Transformer's
load-balancing loss normalised per routed assignment, and an optional expert capacity.

The reference is the grader's own, in float64: `ref_route` routes with a stable sort (ties
to the lower expert index), `ref_kept` admits assignments slot by slot in token order, and
`ref_forward` is dense: every expert on every token, gated by the sparse gate matrix (so it
shares no dispatch code with a candidate's). Inputs are float64 unless a check says
float32; float32 answers are compared with the float64 reference of the same inputs.

Designed routings (ties, capacity) come from `designed(logits)`: x = the identity and
router_weight = logitsᵀ, so x @ router_weight.T is exactly the logits wanted.
Seeded float64 inputs have no ties between experts; every check that does not name k uses
k = 2 (k = 1 hides the renormalisation, k = E the selection).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch.nn import functional as F

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_clean_source, require_nothing_seen

ROUTE, LOSS, FORWARD = "route", "load_balancing_loss", "moe_forward"
F32, F64 = lib.F32, lib.F64
N, D, H, E, K = 13, 5, 7, 6, 2  # tokens, features, hidden units, experts, k: none divides another

# torch's grouped matmuls run every expert's matmul in one call (the MoE kernel); nothing
# else in torch computes a mixture of experts
GROUPED = ("grouped_mm", "_grouped_mm", "scaled_grouped_mm", "_scaled_grouped_mm")
MOE = Watch(
    what="grouped matmul",
    functions=GROUPED,
    ops=("grouped_mm",),
    dispatch_pattern=r"grouped_mm",
    private=r"grouped_mm",
)

exercise = Exercise(
    id="moe",
    tags=("routing", "modules"),
    minutes=40,
    title="Mixture of experts: top-k routing, dispatch, load-balancing loss, capacity",
    seed="-",
    levels=[
        "shapes",
        "routing",
        "combine",
        "aux loss",
        "edge cases",
        "gradients",
        "capacity",
        "from scratch",
    ],
    defines=(ROUTE, LOSS, FORWARD),
    forbidden=GROUPED,
    watch=MOE,
)


# -- inputs ------------------------------------------------------------------------------


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F64) -> torch.Tensor:
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def layer(
    seed: int, *, d: int = D, dtype: torch.dtype = F64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """router_weight (E, d), w1 (E, H, d), w2 (E, d, H), seeded."""
    return (
        randn(E, d, seed=seed + 1, dtype=dtype),
        randn(E, H, d, seed=seed + 2, scale=d**-0.5, dtype=dtype),
        randn(E, d, H, seed=seed + 3, scale=H**-0.5, dtype=dtype),
    )


def designed(
    logits: Sequence[Sequence[float]], seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x = identity (n, n) and router_weight = logitsᵀ, so that the router's logits are
    exactly `logits` (n, E); w1, w2 seeded. Returns x, router_weight, w1, w2."""
    table = torch.tensor(logits, dtype=F64)
    n, e = table.shape
    assert e == E, "designed logits have one column per expert"
    _, w1, w2 = layer(seed, d=n)
    return torch.eye(n, dtype=F64), table.T.contiguous(), w1, w2


# -- the reference (the grader's, float64) ------------------------------------------------


def ref_route(
    x: torch.Tensor, router_weight: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weights (N, k), experts (N, k), probs (N, E): softmax, the top k by a stable sort
    (ties to the lower index), renormalised."""
    probs = torch.softmax(x.double() @ router_weight.double().T, dim=-1)
    experts = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :k]
    top = probs.gather(-1, experts)
    return top / top.sum(dim=-1, keepdim=True), experts, probs


def ref_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """E * sum_e f_e P_e, f_e over the N*k assignments (no gradient), P_e the mean prob."""
    e = probs.shape[-1]
    f = torch.tensor(
        [float((experts == i).sum()) / experts.numel() for i in range(e)], dtype=probs.dtype
    )
    return e * (f * probs.mean(dim=0)).sum()


def ref_kept(experts: torch.Tensor, k: int, capacity_factor: float | None) -> torch.Tensor:
    """(N, k) bool: which assignments an expert admits, slot 0 of every token (in token
    order) before slot 1, up to capacity = ceil(capacity_factor * N * k / E) each."""
    n = experts.shape[0]
    kept = torch.ones(n, k, dtype=torch.bool)
    if capacity_factor is None:
        return kept
    capacity = math.ceil(capacity_factor * n * k / E)
    load = [0] * E
    for slot in range(k):
        for t in range(n):
            e = int(experts[t, slot])
            kept[t, slot] = load[e] < capacity
            load[e] += int(kept[t, slot])
    return kept


def expert_out(h: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.silu(h @ w1.T) @ w2.T


def ref_forward(
    x: torch.Tensor,
    router_weight: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    k: int,
    capacity_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, aux_loss), dense: y = sum_e G[:, e] * expert_e(tokens), G the gate matrix of the
    kept assignments. Differentiable (autograd gives the reference gradients)."""
    tokens = x.reshape(-1, x.shape[-1])
    weights, experts, probs = ref_route(tokens, router_weight, k)
    gate = torch.zeros_like(probs).scatter(
        1, experts, weights * ref_kept(experts, k, capacity_factor)
    )
    y = cast(
        torch.Tensor, sum(gate[:, e : e + 1] * expert_out(tokens, w1[e], w2[e]) for e in range(E))
    )
    return y.reshape(x.shape), ref_loss(probs, experts)


def ref_y(*args: Any, **kwargs: Any) -> torch.Tensor:
    return ref_forward(*args, **kwargs)[0]


def ref_aux(*args: Any, **kwargs: Any) -> torch.Tensor:
    return ref_forward(*args, **kwargs)[1]


# -- answers -------------------------------------------------------------------------------


def name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def of_dtype(value: Any, dtype: torch.dtype, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    """`value` is a floating-point tensor of `shape` and `dtype` (x's)."""
    t = checks.tensor(value, what, shape)
    if t.dtype != dtype:
        raise checks.Failed(f"{what} has dtype {name(t.dtype)}, want {name(dtype)} (x's dtype)")
    return t


def routed(value: Any, x: torch.Tensor, k: int, what: str) -> tuple[torch.Tensor, ...]:
    """route's answer: (weights (N, k), experts (N, k) int64, probs (N, E)) in x's dtype."""
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        raise checks.Interface(
            f"{what}: got {checks.describe(value)}, want a triple (weights, experts, probs)"
        )
    n = x.shape[0]
    weights = of_dtype(value[0], x.dtype, f"{what}'s weights", (n, k))
    experts = checks.integers(value[1], f"{what}'s experts", (n, k))
    if experts.dtype != torch.int64:
        raise checks.Failed(f"{what}'s experts have dtype {name(experts.dtype)}, want int64")
    probs = of_dtype(value[2], x.dtype, f"{what}'s probs", (n, E))
    return weights, experts, probs


def forwarded(
    value: Any, x: torch.Tensor, what: str, any_shape: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_forward's answer: (y of x's shape, a 0-dim aux_loss), both in x's dtype. With
    `any_shape`, a y of x's size in another shape is taken reshaped (the shape is another
    check's)."""
    y, aux = checks.pair(value, what, names=("y", "aux_loss"))
    if any_shape and torch.is_tensor(y) and y.numel() == x.numel():
        y = y.reshape(x.shape)
    return (
        of_dtype(y, x.dtype, f"{what}'s y", tuple(x.shape)),
        of_dtype(aux, x.dtype, f"{what}'s aux_loss", ()),
    )


def fresh(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` in the same layout (strides): each call gets its own tensors."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


def route(kernel, x: torch.Tensor, router_weight: torch.Tensor, k: int, what: str):
    """route(x, router_weight, k) in the kernel, checked for shapes and dtypes."""
    return routed(kernel.get(ROUTE)(fresh(x), fresh(router_weight), k), x, k, what)


def forward(
    kernel, args: tuple, what: str, any_shape: bool = False, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_forward(x, router_weight, w1, w2, k, **kwargs), checked for shapes and dtypes."""
    tensors = [fresh(a) if torch.is_tensor(a) else a for a in args]
    return forwarded(kernel.get(FORWARD)(*tensors, **kwargs), args[0], what, any_shape)


def y_matches(kernel, args: tuple, what: str, any_shape: bool = False, **kwargs: Any) -> None:
    """moe_forward's y matches the dense float64 reference (with `any_shape`, a y of x's
    size in another shape is compared reshaped)."""
    y, _ = forward(kernel, args, what, any_shape, **kwargs)
    checks.close(y, ref_y(*args, **kwargs), f"{what}'s y vs the reference")


def inputs(
    seed: int, *shape: int, dtype: torch.dtype = F64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x of `shape` (default (N, D)) and a layer: (x, router_weight, w1, w2)."""
    x = randn(*(shape or (N, D)), seed=seed, dtype=dtype)
    return (x, *layer(seed, dtype=dtype))


# -- shapes ----------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def route_shapes_and_dtypes(kernel):
    """route gives weights (N, k), experts (N, k) int64 in [0, E) and probs (N, E).

    weights and probs in x's dtype, for float32 and float64 x, k = 2."""
    for dtype in (F32, F64):
        x, rw, _, _ = inputs(1, dtype=dtype)
        what = f"route(x of shape (13, 5), {name(dtype)}, k=2)"
        _, experts, _ = route(kernel, x, rw, K, what)
        if int(experts.min()) < 0 or int(experts.max()) >= E:
            raise checks.Failed(
                f"{what}'s experts range over [{int(experts.min())}, {int(experts.max())}], "
                f"want indices in [0, {E})"
            )


@exercise.check("shapes", hidden=False)
def forward_and_loss_shapes(kernel):
    """moe_forward gives y of x's shape and a 0-dim aux_loss; load_balancing_loss a 0-dim loss.

    x of shape (N, D) and (B, T, D), float32 and float64: every answer in x's (probs')
    dtype."""
    for shape, dtype in (((N, D), F32), ((2, 9, D), F32), ((N, D), F64)):
        args = (*inputs(2, *shape, dtype=dtype), K)
        forward(kernel, args, f"moe_forward(x of shape {shape}, {name(dtype)}, k=2)")
    for dtype in (F32, F64):
        _, experts, probs = ref_route(*inputs(3)[:2], K)
        got = kernel.get(LOSS)(probs.to(dtype), experts)
        of_dtype(got, dtype, f"load_balancing_loss(probs in {name(dtype)}, experts)", ())


# -- routing ---------------------------------------------------------------------------------


@exercise.check("routing")
def probs_are_the_softmax(kernel):
    """route's probs are softmax(x @ router_weight.T) over the experts."""
    x, rw, _, _ = inputs(11)
    _, _, probs = route(kernel, x, rw, K, "route(x, router_weight, 2)")
    checks.close(probs, ref_route(x, rw, K)[2], "route(x, router_weight, 2)'s probs vs softmax")


@exercise.check("routing")
def experts_are_the_top_k(kernel):
    """Each token's experts are its k most probable (compared as sets)."""
    x, rw, _, _ = inputs(12)
    _, experts, _ = route(kernel, x, rw, K, "route(x, router_weight, 2)")
    want = ref_route(x, rw, K)[1]
    checks.equal(experts.sort(dim=-1).values, want.sort(dim=-1).values,
                 "the set of experts per token (sorted by index)")  # fmt: skip


@exercise.check("routing")
def experts_in_decreasing_order(kernel):
    """experts[t] lists the chosen experts from the most probable down (k = 2 and k = 4).

    The weights follow the same order (they decrease along a row)."""
    x, rw, _, _ = inputs(13)
    for k in (2, 4):
        what = f"route(x, router_weight, {k})"
        weights, experts, _ = route(kernel, x, rw, k, what)
        checks.equal(experts, ref_route(x, rw, k)[1], f"{what}'s experts, in order")
        if bool((weights[:, 1:] > weights[:, :-1]).any()):
            raise checks.Failed(f"{what}'s weights increase along a row, want decreasing order")


def weights_match(
    weights: torch.Tensor, experts: torch.Tensor, probs: torch.Tensor, what: str
) -> None:
    """weights[t, j] = probs[t, e] / (sum of the chosen probs), e = experts[t, j]: the
    candidate's own experts (their choice and order are other checks'), the reference's
    probs."""
    chosen = probs.gather(-1, experts.clamp(0, E - 1))
    want = chosen / chosen.sum(dim=-1, keepdim=True)
    checks.close(weights, want, f"{what}'s weights vs the chosen probs renormalised")


@exercise.check("routing", points=2)
def weights_are_renormalised(kernel):
    """weights are the chosen probs renormalised to sum to 1 per token (k = 2).

    weights[t, j] = probs[t, e] / (sum of the k chosen probs), e = experts[t, j]."""
    x, rw, _, _ = inputs(14)
    what = "route(x, router_weight, 2)"
    weights, experts, _ = route(kernel, x, rw, K, what)
    weights_match(weights, experts, ref_route(x, rw, K)[2], what)


@exercise.check("routing")
def k_of_one_gives_weight_one(kernel):
    """k = 1: the expert is the most probable one and its weight is exactly 1."""
    x, rw, _, _ = inputs(15)
    weights, experts, _ = route(kernel, x, rw, 1, "route(x, router_weight, 1)")
    checks.equal(experts, ref_route(x, rw, 1)[1], "route(x, router_weight, 1)'s experts")
    checks.equal(weights, torch.ones(N, 1, dtype=F64), "route(x, router_weight, 1)'s weights")


@exercise.check("routing")
def k_equal_to_e_uses_every_expert(kernel):
    """k = E: every expert, most probable first, with weights = probs (they sum to 1)."""
    x, rw, _, _ = inputs(16)
    what = f"route(x, router_weight, {E})"
    weights, experts, _ = route(kernel, x, rw, E, what)
    want_weights, want_experts, _ = ref_route(x, rw, E)
    checks.equal(experts, want_experts, f"{what}'s experts")
    checks.close(weights, want_weights, f"{what}'s weights")


@exercise.check("routing")
def ties_go_to_the_lower_index(kernel):
    """Equal probabilities rank the lower expert index first (not torch.topk's order).

    x = 0 (every expert ties), and designed logits with ties inside and at the edge of the
    top k."""
    cases = [
        (torch.zeros(4, D, dtype=F64), layer(17)[0], 3),
        (*designed([[1, 3, 3, 3, 0, 0], [2, 2, 2, 2, 2, 2], [0, 1, 0, 1, 0, 1],
                    [5, 0, 5, 0, 5, 0], [0, 0, 0, 0, 4, 4], [9, 1, 1, 1, 1, 1]], 18)[:2], 2),
    ]  # fmt: skip
    for x, rw, k in cases:
        what = f"route(x, router_weight, {k}) with ties"
        _, experts, _ = route(kernel, x, rw, k, what)
        checks.equal(experts, ref_route(x, rw, k)[1], f"{what}'s experts")


@exercise.check("routing")
def k_out_of_range_raises(kernel):
    """k = 0 and k = E + 1 raise ValueError, in route and in moe_forward."""
    x, rw, w1, w2 = inputs(19)
    for k in (0, E + 1):
        lib.raises(kernel.get(ROUTE), (x, rw, k), "ValueError", f"route(x, router_weight, {k})")
        lib.raises(kernel.get(FORWARD), (x, rw, w1, w2, k), "ValueError",
                   f"moe_forward(x, router_weight, w1, w2, {k})")  # fmt: skip


# -- combine ----------------------------------------------------------------------------------


@exercise.check("combine", points=2, hidden=False)
def output_matches_the_reference(kernel):
    """y = sum over the chosen experts of weight * silu(x @ w1[e].T) @ w2[e].T (float32, k = 2).

    N = 13 tokens, D = 5, H = 7, E = 6: no size divides another."""
    y_matches(kernel, (*inputs(21, dtype=F32), K), "moe_forward(x, ..., k=2)")


@exercise.check("combine")
def batched_tokens(kernel):
    """x of shape (B, T, D): every row of x.reshape(-1, D) is a token; y has x's shape."""
    y_matches(kernel, (*inputs(22, 2, 9, D, dtype=F32), K), "moe_forward(x of shape (2, 9, 5))")


@exercise.check("combine")
def every_expert_when_k_is_e(kernel):
    """k = E: y is the dense softmax mixture sum_e probs[:, e] * expert_e(x)."""
    y_matches(kernel, (*inputs(23, dtype=F32), E), f"moe_forward(x, ..., k={E})")


@exercise.check("combine")
def equal_weights_average_two_experts(kernel):
    """A token whose two experts are equally probable gets the mean of their outputs.

    Weights 1/2 each: every slot's own weight, and both experts' outputs added."""
    table = [[3, 3, 0, 0, 0, 0], [0, 0, 2, 2, 0, 0], [0, 0, 0, 0, 5, 5], [1, 0, 0, 0, 0, 1],
             [0, 4, 0, 4, 0, 0], [0, 0, 1, 0, 1, 0], [2, 0, 0, 0, 2, 0]]  # fmt: skip
    y_matches(kernel, (*designed(table, 24), K), "moe_forward(two equal experts per token)")


# -- aux loss ----------------------------------------------------------------------------------


def loss_matches(kernel, probs: torch.Tensor, experts: torch.Tensor, what: str) -> None:
    got = kernel.get(LOSS)(probs, experts)
    checks.close(of_dtype(got, probs.dtype, what, ()), ref_loss(probs, experts),
                 f"{what} vs E * sum(f * P)")  # fmt: skip


@exercise.check("aux loss")
def uniform_routing_gives_one(kernel):
    """Uniform probs (1/4 each, E = 4) and balanced experts (k = 2): the loss is 1."""
    probs = torch.full((8, 4), 0.25, dtype=F64)
    experts = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2]] * 2)
    got = kernel.get(LOSS)(probs, experts)
    checks.close(of_dtype(got, F64, "load_balancing_loss(uniform)", ()),
                 torch.tensor(1.0, dtype=F64), "load_balancing_loss at perfect balance (k = 2)")  # fmt: skip


@exercise.check("aux loss", points=2)
def loss_matches_the_formula(kernel):
    """E * sum_e f_e * P_e for a random routing with k = 2 (f over the N * k assignments)."""
    _, experts, probs = ref_route(*inputs(31)[:2], K)
    loss_matches(kernel, probs, experts, "load_balancing_loss(probs, experts with k = 2)")


@exercise.check("aux loss")
def k_of_one_is_switch(kernel):
    """k = 1: the Switch Transformer's loss, E * sum_e (tokens to e / N) * P_e."""
    _, experts, probs = ref_route(*inputs(32)[:2], 1)
    loss_matches(kernel, probs, experts, "load_balancing_loss(probs, experts with k = 1)")


@exercise.check("aux loss")
def k_equal_to_e_gives_one(kernel):
    """k = E: each f_e is 1/E, so the loss is sum_e P_e = 1 whatever the probs."""
    _, experts, probs = ref_route(*inputs(35)[:2], E)
    loss_matches(kernel, probs, experts, f"load_balancing_loss(probs, experts with k = {E})")


@exercise.check("aux loss")
def loss_with_an_unused_expert(kernel):
    """The last expert receives no assignment: f = 0 there, and the loss still counts E."""
    x, rw, _, _ = inputs(33)
    x[:, 0], rw[E - 1, 0] = 1.0, -30.0  # the last expert's logits far below the others'
    _, experts, probs = ref_route(x, rw, K)
    assert int(experts.max()) < E - 1, "the last expert must get nothing"
    loss_matches(kernel, probs, experts, "load_balancing_loss(an expert with no assignment)")


@exercise.check("aux loss")
def forward_returns_the_loss(kernel):
    """moe_forward's aux_loss is load_balancing_loss of its routing (k = 2)."""
    args = (*inputs(34), K)
    _, aux = forward(kernel, args, "moe_forward(x, ..., k=2)")
    checks.close(aux, ref_aux(*args), "moe_forward(x, ..., k=2)'s aux_loss vs E * sum(f * P)")


# -- edge cases ------------------------------------------------------------------------------------


def unchanged(kernel, fn: str, inputs: dict[str, Any], what: str, **kwargs: Any) -> None:
    """fn(*inputs, **kwargs) (tensors held in the kernel, then read back) leaves every tensor
    as it was."""
    held = {n: kernel.hold(v.clone(), n) if torch.is_tensor(v) else v for n, v in inputs.items()}
    kernel.get(fn)(*held.values(), **kwargs)
    for n, v in inputs.items():
        if torch.is_tensor(v):
            checks.equal(kernel.attribute(held[n], "data"), v, f"{n} after {what}")


@exercise.check("edge cases")
def forward_leaves_inputs_unchanged(kernel):
    """route and moe_forward (with and without a capacity) modify none of their inputs."""
    x, rw, w1, w2 = inputs(61)
    unchanged(kernel, ROUTE, {"x": x, "router_weight": rw, "k": K}, "route(x, router_weight, 2)")
    tensors = {"x": x, "router_weight": rw, "w1": w1, "w2": w2, "k": K}
    unchanged(kernel, FORWARD, tensors, "moe_forward(x, ..., k=2)")
    unchanged(kernel, FORWARD, tensors, "moe_forward(..., capacity_factor=0.5)",
              capacity_factor=0.5)  # fmt: skip


@exercise.check("edge cases")
def loss_leaves_inputs_unchanged(kernel):
    """load_balancing_loss modifies neither probs nor experts."""
    _, experts, probs = ref_route(*inputs(62)[:2], K)
    unchanged(kernel, LOSS, {"probs": probs, "experts": experts},
              "load_balancing_loss(probs, experts)")  # fmt: skip


@exercise.check("edge cases")
def an_expert_without_tokens(kernel):
    """An expert that no token chooses (expert 2: logits far below) contributes nothing."""
    x, rw, w1, w2 = inputs(63)
    x[:, 0], rw[2, 0] = 1.0, -30.0
    assert not bool((ref_route(x, rw, K)[1] == 2).any()), "expert 2 must get no token"
    y_matches(kernel, (x, rw, w1, w2, K), "moe_forward(x, ..., k=2) with expert 2 unused")


@exercise.check("edge cases")
def non_contiguous_inputs(kernel):
    """Non-contiguous x (B, T, D), router_weight, w1 and w2 (x.view(-1, D) fails)."""
    args = (*(lib.noncontiguous(t) for t in inputs(64, 2, 9, D, dtype=F32)), K)
    y_matches(kernel, args, "moe_forward(non-contiguous inputs)", any_shape=True)


@exercise.check("edge cases")
def large_logits_are_stable(kernel):
    """Router logits near 1000 (float64): the softmax stays finite (max subtracted)."""
    x, rw, w1, w2 = inputs(65)
    x[:, 0], rw[:, 0] = 1.0, 1000.0
    args = (x, rw, w1, w2, K)
    what = "moe_forward(x, ...) with logits near 1000"
    y, _ = forward(kernel, args, what)
    checks.finite(y, f"{what}'s y")
    checks.close(y, ref_y(*args), f"{what}'s y vs the reference")


@exercise.check("edge cases")
def float64_keeps_its_precision(kernel):
    """float64 stays float64: router logits near 300 that differ by ~1 match to 1e-7.

    Rounding the logits or probs to float32 moves the weights by ~1e-5."""
    x, rw, _, _ = inputs(66)
    x[:, 0], rw[:, 0] = 1.0, 300.0
    what = "route(float64 x) with logits near 300"
    weights, experts, probs = route(kernel, x, rw, K, what)
    want_probs = ref_route(x, rw, K)[2]
    checks.close(probs, want_probs, f"{what}'s probs")
    weights_match(weights, experts, want_probs, what)


# -- gradients ---------------------------------------------------------------------------------

NAMES = ["x", "router_weight", "w1", "w2"]


@exercise.check("gradients", points=2)
def output_gradients(kernel):
    """Gradients of y w.r.t. x, router_weight, w1 and w2 match autograd (float64, k = 2)."""
    lib.gradients_match(kernel, kernel.get(FORWARD), (*inputs(41), K), ref_y, [0, 1, 2, 3],
                        "moe_forward's y", names=NAMES, output_path=[0])  # fmt: skip


@exercise.check("gradients")
def router_learns_from_the_output(kernel):
    """router_weight gets a nonzero gradient from y (k = 2: through the weights)."""
    args = (*inputs(42), K)
    got = kernel.grad(kernel.get(FORWARD), args, {}, wrt=[1], cotangent=randn(N, D, seed=43),
                      output_path=[0], params=False)["inputs"][0]  # fmt: skip
    got = checks.tensor(got, "gradient of y w.r.t. router_weight", (E, D))
    checks.differ(got, torch.zeros(E, D, dtype=F64),
                  "gradient of y w.r.t. router_weight vs zero (is the gate detached?)")  # fmt: skip


@exercise.check("gradients")
def aux_loss_gradients(kernel):
    """Gradients of aux_loss w.r.t. x and router_weight match autograd (through P only).

    f is a count and carries no gradient."""
    lib.gradients_match(kernel, kernel.get(FORWARD), (*inputs(44), K), ref_aux, [0, 1],
                        "moe_forward's aux_loss", names=NAMES[:2], output_path=[1])  # fmt: skip


# -- capacity ------------------------------------------------------------------------------------


def capacity_case(kernel, args: tuple, factor: float | None, what: str) -> None:
    y_matches(kernel, args, f"moe_forward({what}, capacity_factor={factor})", any_shape=True,
              capacity_factor=factor)  # fmt: skip


# Designed routings: each row is one token's logits over the E = 6 experts.
TO_EXPERT_0 = [[4, 1, 0, 0, 0, -1]] * 6 + [[0, 4, 1, 0, 0, 0], [0, 1, 0, 0, 0, 4]]
SECOND_CHOICES = [[4, 2, 1, 0, 0, 0], [4, 1, 0, 0, 0, 2]] * 4
CROSSED = [[4, 2, 0, 0, 0, 0], [2, 4, 0, 0, 0, 0], [0, 0, 4, 2, 0, 0], [0, 0, 2, 4, 0, 0],
           [1, 0, 0, 0, 4, 2], [0, 0, 0, 1, 2, 4]]  # fmt: skip


@exercise.check("capacity", points=2)
def earlier_tokens_come_first(kernel):
    """An expert over capacity keeps the earliest tokens; the others get y = 0 (k = 1).

    Six of 8 tokens choose expert 0; capacity ceil(0.75 * 8 * 1 / 6) = 1."""
    capacity_case(kernel, (*designed(TO_EXPERT_0, 51), 1), 0.75, "six tokens to expert 0, k=1")


@exercise.check("capacity")
def capacity_rounds_up(kernel):
    """The capacity is rounded up: ceil(1.25 * 8 * 1 / 6) = ceil(1.67) = 2 (k = 1).

    Six of 8 tokens choose expert 0: the first two are kept."""
    capacity_case(kernel, (*designed(TO_EXPERT_0, 52), 1), 1.25, "six tokens to expert 0, k=1")


@exercise.check("capacity")
def first_choices_before_second_choices(kernel):
    """Every token's first choice comes before any second choice (k = 2, capacity 1)."""
    capacity_case(kernel, (*designed(CROSSED, 53), K), 0.5, "crossed first and second choices")


@exercise.check("capacity")
def kept_weights_are_not_renormalised(kernel):
    """A token whose first choice is dropped keeps its second at its own weight (not 1)."""
    capacity_case(kernel, (*designed(SECOND_CHOICES, 54), K), 1.5,
                  "every first choice to expert 0")  # fmt: skip


@exercise.check("capacity")
def zero_capacity_drops_everything(kernel):
    """capacity_factor = 0.0 (falsy, not None): capacity 0, y = 0 exactly."""
    args = (*inputs(55), K)
    y, _ = forward(kernel, args, "moe_forward(x, ..., k=2, capacity_factor=0.0)",
                   capacity_factor=0.0)  # fmt: skip
    lib.exactly_zero(y, "moe_forward(x, ..., capacity_factor=0.0)'s y")


@exercise.check("capacity")
def ample_capacity_drops_nothing(kernel):
    """capacity_factor = E / k = 3 gives capacity N: an expert chosen by all drops none."""
    x, rw, w1, w2 = inputs(56)
    x[:, 0], rw[0, 0] = 1.0, 30.0  # every token's first choice is expert 0
    capacity_case(kernel, (x, rw, w1, w2, K), 3.0, "x, with expert 0 chosen by all")


@exercise.check("capacity")
def capacity_counts_every_token(kernel):
    """x of shape (B, T, D): the capacity counts all B * T tokens, in x.reshape(-1, D)'s order.

    capacity_factor = 1.0 with 18 tokens: capacity 6, not 3."""
    x, rw, w1, w2 = inputs(57, 2, 9, D)
    x[..., 0], rw[0, 0] = 1.0, 3.0  # expert 0 overflows
    capacity_case(kernel, (x, rw, w1, w2, K), 1.0, "x of shape (2, 9, 5)")


@exercise.check("capacity")
def aux_loss_ignores_capacity(kernel):
    """aux_loss counts every routed assignment, dropped ones included (capacity ignored).

    moe_forward's aux_loss with capacity_factor=0.5 equals its aux_loss without."""
    x, rw, w1, w2 = inputs(59)
    x[:, 0], rw[0, 0] = 1.0, 3.0
    args = (x, rw, w1, w2, K)
    _, experts, _ = ref_route(x, rw, K)
    assert int(experts.max()) == E - 1 and not bool(ref_kept(experts, K, 0.5).all())
    _, capped = forward(kernel, args, "moe_forward(..., capacity_factor=0.5)", capacity_factor=0.5)
    _, plain = forward(kernel, args, "moe_forward(...)")
    checks.same(capped, plain, "moe_forward(..., capacity_factor=0.5)'s aux_loss vs "
                "moe_forward(...)'s, without a capacity")  # fmt: skip


# -- from scratch ---------------------------------------------------------------------------------


@exercise.check("from scratch")
def experts_see_only_their_tokens(kernel):
    """Sparse dispatch: an expert that receives no token is never evaluated.

    Its weights are NaN here: y stays finite, and equals the call with finite weights."""
    x, rw, w1, w2 = inputs(71)
    x[:, 0], rw[2, 0] = 1.0, -30.0  # expert 2 gets no token
    clean = (x, rw, w1.clone(), w2.clone(), K)
    w1[2], w2[2] = float("nan"), float("nan")
    what = "moe_forward(x, ...) with an unused expert's weights NaN"
    y, _ = forward(kernel, (x, rw, w1, w2, K), what)
    checks.finite(y, f"{what}'s y (is every expert run on every token?)")
    plain, _ = forward(kernel, clean, "moe_forward(x, ...)")
    checks.same(y, plain, f"{what}'s y vs the same call with finite weights")


@exercise.check("from scratch")
def no_grouped_matmul(kernel):
    """Neither the source nor the run uses torch's grouped matmuls (F.grouped_mm and kin)."""
    forward(kernel, (*inputs(72), K), "moe_forward(x, ..., k=2)")
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)
    require_nothing_seen(kernel.seen)
