"""Helpers shared by the attention suites: seeded inputs, masks, and the torch oracle.

Everything here runs in the grader's process with the grader's own torch.
"""

from __future__ import annotations

import torch
from torch import nn

from grader import checks
from grader.checks import Failed


def randn(
    *shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Reproducible normal noise, independent of the global RNG."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).mul(scale).to(dtype)


def causal_allow(t: int, s: int | None = None) -> torch.Tensor:
    """[T, S] bool, True = may attend (key j <= query i)."""
    s = t if s is None else s
    return torch.arange(s)[None, :] <= torch.arange(t)[:, None]


def padding_keep(lengths: list[int], s: int) -> torch.Tensor:
    """[B, S] bool, True = real token, for per-sample lengths."""
    return torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]


def fold_heads(mask: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, 1, T, S] or [B, T, S] -> [B*H, T, S] in nn.MultiheadAttention's b*H + h order."""
    if mask.dim() == 4:
        mask = mask[:, 0]
    return mask.repeat_interleave(heads, dim=0)


def require(state: dict, names: list[str], owner: str) -> dict[str, torch.Tensor]:
    """The named tensors from a candidate state_dict, or a Failed naming what is missing."""
    if not isinstance(state, dict):
        raise Failed(f"{owner}.state_dict() did not return a dict")
    missing = [n for n in names if not isinstance(state.get(n), torch.Tensor)]
    if missing:
        raise Failed(
            f"{owner} has no {', '.join(missing)} in its state_dict (keep the scaffold's layers)"
        )
    return {n: state[n] for n in names}


def oracle(
    embed_dim: int,
    num_heads: int,
    q: tuple[torch.Tensor, torch.Tensor | None],
    k: tuple[torch.Tensor, torch.Tensor | None],
    v: tuple[torch.Tensor, torch.Tensor | None],
    out: tuple[torch.Tensor, torch.Tensor | None],
    dtype: torch.dtype = torch.float64,
) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention (batch first, eval mode) holding the given projections."""
    bias = q[1] is not None
    mha = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True, dtype=dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([q[0], k[0], v[0]]))
        mha.out_proj.weight.copy_(out[0])
        if bias:
            mha.in_proj_bias.copy_(torch.cat([q[1], k[1], v[1]]))
            mha.out_proj.bias.copy_(out[1])
    return mha.eval()


def run_oracle(
    mha: nn.MultiheadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    blocked: torch.Tensor | None = None,
    ignore_keys: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Oracle output and head-averaged weights. `blocked` is in the module's own convention
    (bool True = blocked, or float added; [T,S] or [B*H,T,S]); `ignore_keys` is [B,S], True = pad."""
    with torch.no_grad():
        y, w = mha(
            query, key, value,
            attn_mask=blocked, key_padding_mask=ignore_keys,
            need_weights=True, average_attn_weights=True,
        )  # fmt: skip
    return y, w


def require_gradients(grads: dict, input_shape: tuple[int, ...]) -> None:
    """Gradients from `Kernel.grad`: every parameter got one, every weight a non-zero one,
    and the input a finite, non-zero one. (Key biases may get exactly zero: softmax ignores
    a shift shared by all keys.)"""
    (gx,) = grads["inputs"]
    missing = [name for name, g in grads["params"].items() if g is None]
    if missing:
        raise Failed(f"no gradient reached {', '.join(missing)}")
    checks.tensor(gx, "gradient of the input", input_shape)
    checks.finite(gx, "gradient of the input")
    dead = [
        n for n, g in grads["params"].items() if n.endswith("weight") and float(g.abs().max()) == 0
    ]
    if dead or float(gx.abs().max()) == 0:
        raise Failed(f"zero gradient for {', '.join(dead) or 'the input'}")
