"""What the `mha_module` checks share: sizes, building and calling the candidate's two modules,
and the nn.MultiheadAttention oracle with per-head weights.

Everything here runs in the grader's process; the candidate's modules are remotes.
"""

from __future__ import annotations

import torch
from torch import nn

from grader import checks
from grader.checks import Failed
from grader.exercises import _attention as att
from grader.remote import Kernel, Remote

# B, H, Lq, Lk and d_k all differ, and H >= 2, so layout and broadcasting bugs show.
E, H, B, LQ, LK = 12, 3, 2, 5, 7
DK = E // H
UNFUSED = ("W_Q", "W_K", "W_V", "W_O")


def inputs(
    batch: int = B, cross: bool = True, dtype: torch.dtype = torch.float32, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query, key, value): distinct tensors for cross-attention, one tensor for self-attention."""
    q = att.randn(batch, LQ, E, seed=seed, dtype=dtype)
    if not cross:
        return q, q, q
    k = att.randn(batch, LK, E, seed=seed + 1, dtype=dtype)
    return q, k, att.randn(batch, LK, E, seed=seed + 2, dtype=dtype)


def padding(lengths: list[int], lk: int = LK) -> torch.Tensor:
    """[B, 1, 1, Lk] bool, True = real key."""
    return att.padding_keep(lengths, lk)[:, None, None, :]


def random_allow(batch: int, lq: int, lk: int, seed: int) -> torch.Tensor:
    """[B, 1, Lq, Lk] bool, different per sample, no fully masked row."""
    allow = torch.rand(batch, 1, lq, lk, generator=torch.Generator().manual_seed(seed)) > 0.4
    allow[..., seed % lk] = True
    return allow


def build(
    kernel: Kernel,
    *,
    dropout: float = 0.0,
    bias: bool = True,
    d_model: int = E,
    heads: int = H,
    seed: int = 0,
) -> Remote:
    """The candidate's MultiHeadAttention, in eval mode."""
    mha = kernel.new("MultiHeadAttention", d_model, heads, dropout=dropout, bias=bias, seed=seed)
    mha.eval()
    return mha


def build_fused(kernel: Kernel, *, dropout: float = 0.0, seed: int = 0) -> Remote:
    """The candidate's EfficientMultiHeadAttention, in eval mode."""
    module = kernel.new("EfficientMultiHeadAttention", E, H, dropout=dropout, seed=seed)
    module.eval()
    return module


def forward(
    mha: Remote,
    query: torch.Tensor,
    key: torch.Tensor | None = None,
    value: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MultiHeadAttention(query, key, value, mask=mask); self-attention when key is None.
    Checks the output [B, Lq, E] and the per-head weights [B, H, Lq, Lk]."""
    key = query if key is None else key
    value = key if value is None else value
    y, w = checks.pair(mha(query, key, value, mask=mask), "forward(query, key, value)")
    batch, lq, lk = query.shape[0], query.shape[1], key.shape[1]
    checks.tensor(y, "output", (batch, lq, E))
    checks.tensor(w, "weights", (batch, H, lq, lk))
    return y, w


def forward_fused(
    module: Remote, x: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """EfficientMultiHeadAttention(x, mask=mask), checking both shapes."""
    y, w = checks.pair(module(x, mask=mask), "EfficientMultiHeadAttention.forward(x)")
    batch, length = x.shape[0], x.shape[1]
    checks.tensor(y, "fused output", (batch, length, E))
    checks.tensor(w, "fused weights", (batch, H, length, length))
    return y, w


def random_biases(
    mha: Remote, dtype: torch.dtype, bias: bool = True, seed: int = 7
) -> dict[str, torch.Tensor]:
    """Cast the unfused module to `dtype`, give it random biases (fresh biases are zero and hide
    bias bugs), and return its projections' weights and biases."""
    names = [f"{p}.weight" for p in UNFUSED] + ([f"{p}.bias" for p in UNFUSED] if bias else [])
    att.require(mha.state_dict(), names, "MultiHeadAttention")
    mha.to(dtype)
    if bias:
        biases = {
            f"{p}.bias": att.randn(E, seed=seed + i, scale=0.5, dtype=dtype)
            for i, p in enumerate(UNFUSED)
        }
        mha.load_state_dict(biases, strict=False)
    return {
        n: t.to(dtype)
        for n, t in att.require(mha.state_dict(), names, "MultiHeadAttention").items()
    }


def unfused_oracle(mha: Remote, dtype: torch.dtype, bias: bool = True) -> nn.MultiheadAttention:
    """Randomise the module's biases; an oracle holding the same projections."""
    state = random_biases(mha, dtype, bias)
    parts = [(state[f"{p}.weight"], state.get(f"{p}.bias")) for p in UNFUSED]
    return att.oracle(E, H, *parts, dtype=dtype)


def fused_oracle(module: Remote, dtype: torch.dtype, seed: int = 17) -> nn.MultiheadAttention:
    """Randomise the fused module's biases; an oracle whose in_proj is its qkv_proj."""
    names = ["qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias"]
    att.require(module.state_dict(), names, "EfficientMultiHeadAttention")
    module.to(dtype)
    biases = {
        "qkv_proj.bias": att.randn(3 * E, seed=seed, scale=0.5, dtype=dtype),
        "out_proj.bias": att.randn(E, seed=seed + 1, scale=0.5, dtype=dtype),
    }
    module.load_state_dict(biases, strict=False)
    s = {n: t.to(dtype) for n, t in att.require(module.state_dict(), names, "fused").items()}
    q, k, v = zip(s["qkv_proj.weight"].chunk(3), s["qkv_proj.bias"].chunk(3), strict=True)
    return att.oracle(E, H, q, k, v, (s["out_proj.weight"], s["out_proj.bias"]), dtype=dtype)


def blocked(mask: torch.Tensor, batch: int, lq: int, lk: int) -> torch.Tensor:
    """The module's mask (nonzero = attend; [B or 1, 1, 1 or Lq, Lk]) as nn.MultiheadAttention's
    bool attn_mask (True = blocked), folded to [B*H, Lq, Lk]."""
    allowed = (mask != 0).expand(batch, 1, lq, lk)
    return att.fold_heads(~allowed, H)


def per_head_oracle(
    ref: nn.MultiheadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Oracle output and per-head weights [B, H, Lq, Lk], on the deterministic (slow) path.
    Never give it fully masked rows: it returns NaN for those."""
    folded = None if mask is None else blocked(mask, query.shape[0], query.shape[1], key.shape[1])
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return ref(
            query, key, value, attn_mask=folded, need_weights=True, average_attn_weights=False
        )
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)


def exactly_zero(t: torch.Tensor, what: str) -> None:
    """Every entry of `t` is exactly 0 (and none is NaN)."""
    checks.finite(t, what)
    worst = float(t.abs().max())
    if worst != 0:
        raise Failed(f"{what}: max {worst:.3g}, want exactly 0")


def zero_fraction(t: torch.Tensor, what: str, low: float, high: float) -> None:
    """`t` is finite and the fraction of its entries that are exactly 0 lies in [low, high]."""
    checks.finite(t, what)
    frac = float((t == 0).double().mean())
    if not low <= frac <= high:
        raise Failed(f"{what}: {frac:.0%} of entries are exactly 0, want {low:.0%} to {high:.0%}")


def numel(state: dict) -> int:
    """How many numbers a state_dict holds."""
    return sum(t.numel() for t in state.values() if isinstance(t, torch.Tensor))


def all_gradients(grads: dict, inputs_named: tuple[str, ...], shape_of: dict) -> None:
    """Every parameter and every input got a finite, nonzero gradient."""
    missing = [name for name, g in grads["params"].items() if g is None]
    if missing:
        raise Failed(f"no gradient reached {', '.join(missing)}")
    for name, g in zip(inputs_named, grads["inputs"], strict=True):
        checks.tensor(g, f"gradient of {name}", shape_of[name])
        checks.finite(g, f"gradient of {name}")
        if float(g.abs().max()) == 0:
            raise Failed(f"zero gradient for {name}")
    dead = [
        n for n, g in grads["params"].items() if n.endswith("weight") and float(g.abs().max()) == 0
    ]
    if dead:
        raise Failed(f"zero gradient for {', '.join(dead)}")


def seeded_forward(
    kernel: Kernel, module: Remote, args: tuple, seed: int, label: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """forward(*args) with torch seeded first in the kernel (dropout draws are reproducible)."""
    y, w = checks.pair(kernel.call(module.target, None, args, {}, label, seed=seed), label)
    return checks.tensor(y, f"{label} output"), checks.tensor(w, f"{label} weights")
