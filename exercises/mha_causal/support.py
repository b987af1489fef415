"""Helpers for the `mha_causal` suite: builders for the candidate's three classes, weight
surgery through `state_dict`, and an independent float64 reference.

Everything here runs in the grader's process; candidate code is reached only through the
`Remote` objects the builders return.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from grader import checks
from grader.checks import Failed
from grader.exercises import _attention as att

# B, H, T, head_dim all differ and d_in != d_out; T < CTX, so the mask must be cut to T x T.
D_IN, D_OUT, H, B, T, CTX = 5, 12, 3, 2, 7, 10
HD = D_OUT // H
QKV = ("W_query", "W_key", "W_value")
SPLIT = (*QKV, "out_proj")

Layer = tuple[torch.Tensor, torch.Tensor | None]


def causal_attention(
    kernel, d_in=D_IN, d_out=D_OUT, dropout=0.0, bias=True, ctx=CTX, seed=0
) -> Any:
    """The candidate's CausalAttention (in eval mode when it has dropout)."""
    module = kernel.new("CausalAttention", d_in, d_out, ctx, dropout, qkv_bias=bias, seed=seed)
    return evaluated(module, dropout)


def wrapper(kernel, d_in=D_IN, d_head=HD, heads=H, dropout=0.0, bias=True, ctx=CTX, seed=0) -> Any:
    """The candidate's MultiHeadAttentionWrapper (heads of width d_head)."""
    module = kernel.new(
        "MultiHeadAttentionWrapper", d_in, d_head, ctx, dropout, heads, qkv_bias=bias, seed=seed
    )
    return evaluated(module, dropout)


def split(kernel, d_in=D_IN, d_out=D_OUT, heads=H, dropout=0.0, bias=True, ctx=CTX, seed=0) -> Any:
    """The candidate's (split-weights) MultiHeadAttention."""
    module = kernel.new(
        "MultiHeadAttention", d_in, d_out, ctx, dropout, heads, qkv_bias=bias, seed=seed
    )
    return evaluated(module, dropout)


def evaluated(module, dropout: float) -> Any:
    # With dropout 0 train and eval mode agree; skipping the call saves a kernel round trip.
    if dropout:
        module.eval()
    return module


def head_layers(heads: int = H) -> list[str]:
    """The wrapper's projection names, head by head: heads.0.W_query, heads.0.W_key, ..."""
    return [f"heads.{h}.{name}" for h in range(heads) for name in QKV]


def output(module, x: torch.Tensor, what: str, shape=None) -> torch.Tensor:
    """forward(x), which must return one floating-point tensor (of `shape`, when given)."""
    return checks.tensor(module(x), what, shape)


def seeded(module, x: torch.Tensor, what: str, seed: int) -> torch.Tensor:
    """forward(x) with torch seeded first in the kernel (reproducible dropout)."""
    return checks.tensor(module.kernel.call(module.target, None, (x,), {}, what, seed=seed), what)


def with_random_biases(
    module, owner: str, layers, dtype=torch.float64, seed: int = 7
) -> dict[str, Layer]:
    """Give every layer a random bias (fresh biases are zero and hide bias bugs), cast the
    module to `dtype`, and return each layer's (weight, bias) as the module now holds them."""
    names = [f"{layer}.{kind}" for layer in layers for kind in ("weight", "bias")]
    state = att.require(module.state_dict(), names, owner)
    biases = {
        f"{layer}.bias": att.randn(state[f"{layer}.bias"].shape[0], seed=seed + i, scale=0.5)
        for i, layer in enumerate(layers)
    }
    load(module, owner, biases)
    module.to(dtype)
    return {
        layer: (state[f"{layer}.weight"].to(dtype), biases[f"{layer}.bias"].to(dtype))
        for layer in layers
    }


def load(module, owner: str, tensors: dict[str, torch.Tensor]) -> None:
    """Overwrite some of the module's tensors; each must exist in its state_dict."""
    answer = module.load_state_dict(tensors, strict=False)
    unknown = list(answer[1]) if isinstance(answer, (tuple, list)) and len(answer) == 2 else []
    if unknown:
        raise Failed(
            f"{owner} has no {', '.join(unknown[:4])} in its state_dict (keep the scaffold's layers)"
        )


def constant_values(layer: str, d_in: int, d_out: int, value: float) -> dict[str, torch.Tensor]:
    """Tensors that make `layer` (a value projection) output `value` for every token."""
    return {
        f"{layer}.weight": torch.zeros(d_out, d_in),
        f"{layer}.bias": torch.full((d_out,), value),
    }


def identity(layer: str, width: int) -> dict[str, torch.Tensor]:
    """Tensors that make `layer` (out_proj) the identity."""
    return {f"{layer}.weight": torch.eye(width), f"{layer}.bias": torch.zeros(width)}


def reference(
    x: torch.Tensor, q: Layer, k: Layer, v: Layer, heads: int = 1, out: Layer | None = None
) -> torch.Tensor:
    """Causal multi-head self-attention written independently of the candidate's layout: one
    head at a time on channel slices, no view/transpose of the projections."""
    queries, keys, values = F.linear(x, *q), F.linear(x, *k), F.linear(x, *v)
    width = queries.shape[-1] // heads
    n = x.shape[1]
    allow = att.causal_allow(n)
    outputs = []
    for h in range(heads):
        part = slice(h * width, (h + 1) * width)
        scores = queries[..., part] @ keys[..., part].transpose(-1, -2) / math.sqrt(width)
        weights = torch.softmax(scores.masked_fill(~allow, float("-inf")), dim=-1)
        outputs.append(weights @ values[..., part])
    y = torch.cat(outputs, dim=-1)
    return y if out is None else F.linear(y, *out)


def layout(state: Any, expected: dict[str, tuple[int, ...]], owner: str) -> dict[str, torch.Tensor]:
    """The state_dict must hold exactly the expected names, with the expected shapes."""
    if not isinstance(state, dict):
        raise Failed(f"{owner}.state_dict() did not return a dict")
    missing = [n for n in expected if not isinstance(state.get(n), torch.Tensor)]
    if missing:
        raise Failed(
            f"{owner}.state_dict() has no {', '.join(missing[:4])}"
            + (f" (+{len(missing) - 4} more)" if len(missing) > 4 else "")
            + "; keep the scaffold's layers and the registered mask buffer"
        )
    extra = sorted(set(state) - set(expected))
    if extra:
        raise Failed(f"{owner}.state_dict() has unexpected entries: {', '.join(extra[:4])}")
    for name, shape in expected.items():
        if tuple(state[name].shape) != tuple(shape):
            raise Failed(f"{owner}: {name} has shape {tuple(state[name].shape)}, want {shape}")
    return state


def projections(
    layers, d_in: int, d_out: int, bias: bool, out: str | None = None
) -> dict[str, tuple[int, ...]]:
    """Expected state_dict shapes of nn.Linear(d_in, d_out) layers (and an out_proj)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in layers:
        shapes[f"{layer}.weight"] = (d_out, d_in)
        if bias:
            shapes[f"{layer}.bias"] = (d_out,)
    if out:
        shapes[f"{out}.weight"] = (d_out, d_out)
        shapes[f"{out}.bias"] = (d_out,)
    return shapes


def after_changing_later_tokens(module, x: torch.Tensor, t: int, what: str, seed: int = 9) -> None:
    """Outputs up to position t do not move when tokens after t change; later ones do."""
    later = x.clone()
    later[:, t + 1 :] += att.randn(x.shape[0], x.shape[1] - t - 1, x.shape[2], seed=seed, scale=3.0)
    y1 = output(module, x, f"{what} output")
    y2 = output(module, later, f"{what} output", tuple(y1.shape))
    checks.same(
        y2[:, : t + 1], y1[:, : t + 1], f"{what} y[:, :{t + 1}] after changing tokens after t={t}"
    )
    checks.differ(
        y2[:, t + 1 :], y1[:, t + 1 :], f"{what} y after t (must react to its own tokens)"
    )


def grads_reach(grads: dict, expected: list[str], owner: str, shape) -> None:
    """Every expected parameter, and nothing else, gets a nonzero gradient; so does the input."""
    params = grads["params"]
    extra = sorted(set(params) - set(expected))
    if extra:
        raise Failed(
            f"{owner} has unexpected parameters: {', '.join(extra[:4])} (mask is a buffer)"
        )
    missing = [n for n in expected if params.get(n) is None]
    if missing:
        raise Failed(f"no gradient reached {owner}.{', '.join(missing[:4])}")
    (gx,) = grads["inputs"]
    checks.tensor(gx, f"gradient of {owner}'s input", shape)
    checks.finite(gx, f"gradient of {owner}'s input")
    dead = [n for n in expected if n.endswith("weight") and float(params[n].abs().max()) == 0]
    if dead or float(gx.abs().max()) == 0:
        raise Failed(f"zero gradient for {owner}.{dead[0] if dead else 'input'}")


def all_or_nothing(y0: torch.Tensor, v0: torch.Tensor, keep: float, what: str) -> None:
    """Row by row, the first query's output (one visible key, weight 1) is either 0 (weight
    dropped) or v0 / keep (weight kept and rescaled), at the dtype's default tolerance:
    dropout acted on the attention weight. NaN or inf anywhere fails."""
    checks.finite(y0, what)
    scaled = v0 / keep
    tol = checks.tolerance(y0.dtype, v0.dtype)
    for row in range(y0.shape[0]):
        dropped = checks.tolerance_ratio(y0[row], torch.zeros_like(scaled[row]), tol)
        kept = checks.tolerance_ratio(y0[row], scaled[row], tol)
        if min(float(dropped.max()), float(kept.max())) > 1:
            off = min(float(y0[row].abs().max()), float((y0[row] - scaled[row]).abs().max()))
            raise Failed(
                f"{what}: row {row} is neither 0 nor v[0] / {keep:g} (off by {off:.3g}); "
                "dropout must drop whole attention weights, not output entries"
            )
