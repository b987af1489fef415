"""Assertions for hidden tests, with messages that say what was expected and what was found.

Each helper raises `Failed` with one line, numbers included:
``weights on padded keys: max 0.31, want < 1e-6``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class Failed(AssertionError):
    """A hidden test's verdict: the candidate's answer is wrong (message is one line)."""


def describe(value: Any) -> str:
    """A short description of a returned value's type and shape."""
    from grader.remote import Foreign, Remote

    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a {_dtype(value)} tensor of shape {tuple(value.shape)}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, Foreign):
        return f"a {value.type}"
    if isinstance(value, Remote):
        return f"a {value.type_name or 'Python object'}"
    return f"a {type(value).__name__} ({value!r:.40})"


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def tensor(value: Any, what: str, shape: Sequence[int] | None = None) -> torch.Tensor:
    """`value` must be a tensor (of `shape`, when given); returns it."""
    if not isinstance(value, torch.Tensor):
        raise Failed(f"{what}: got {describe(value)}, want a torch.Tensor")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise Failed(f"{what} shape {tuple(value.shape)}, want {tuple(shape)}")
    if not value.is_floating_point():
        raise Failed(f"{what} has dtype {_dtype(value)}, want a floating-point tensor")
    return value


def pair(value: Any, what: str) -> tuple[Any, Any]:
    """`value` must be a 2-tuple (or list), e.g. forward's (output, weights)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Failed(f"{what}: got {describe(value)}, want a pair (output, weights)")
    return value[0], value[1]


def is_none(value: Any, what: str) -> None:
    """`value` must be None."""
    if value is not None:
        raise Failed(f"{what}: got {describe(value)}, want None")


def finite(t: torch.Tensor, what: str) -> None:
    """No NaN or inf anywhere in `t`."""
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    if nan or inf:
        raise Failed(f"{what}: {nan} NaN and {inf} inf values out of {t.numel()}")


def small(t: torch.Tensor, what: str, bound: float) -> None:
    """Every |entry| of `t` is below `bound`."""
    if t.numel() == 0:
        return
    finite(t, what)
    worst = float(t.abs().max())
    if not worst < bound:
        raise Failed(f"{what}: max {worst:.3g}, want < {bound:.0e}")


def close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    *,
    rtol: float,
    atol: float,
) -> None:
    """`actual` matches `expected` elementwise: |a - e| <= atol + rtol * |e|."""
    actual = tensor(actual, what, expected.shape)
    finite(actual, what)
    a = actual.to(torch.float64)
    e = expected.to(torch.float64)
    excess = (a - e).abs() - (atol + rtol * e.abs())
    if bool((excess > 0).any()):
        diff = (a - e).abs()
        at = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        raise Failed(
            f"{what}: max abs diff {float(diff.max()):.3g} at {list(at)} "
            f"(got {float(a[at]):.6g}, want {float(e[at]):.6g}; "
            f"tolerance atol={atol:.0e}, rtol={rtol:.0e})"
        )


def same(actual: torch.Tensor, expected: torch.Tensor, what: str, atol: float = 1e-6) -> None:
    """Two outputs of the candidate that must agree (up to float32 noise)."""
    close(actual, expected, what, rtol=0.0, atol=atol)


def differ(a: torch.Tensor, b: torch.Tensor, what: str, at_least: float = 1e-4) -> None:
    """Two outputs that must not be the same."""
    if tuple(a.shape) == tuple(b.shape) and float((a - b).abs().max()) < at_least:
        raise Failed(
            f"{what}: max abs diff {float((a - b).abs().max()):.3g}, want >= {at_least:.0e}"
        )


def rows_sum_to_one(w: torch.Tensor, what: str, atol: float = 1e-5) -> None:
    """Attention weights: non-negative, summing to 1 over the last axis."""
    finite(w, what)
    low = float(w.min())
    if low < -atol:
        raise Failed(f"{what}: min {low:.3g}, want >= 0")
    sums = w.sum(dim=-1)
    worst = float((sums - 1).abs().max())
    if worst > atol:
        raise Failed(
            f"{what}: rows sum to between {float(sums.min()):.4g} and {float(sums.max()):.4g}, want 1 (±{atol:.0e})"
        )
