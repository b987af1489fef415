"""Assertions for hidden tests, with messages that say what was expected and what was found.

Each helper raises `Failed` with one line, numbers included:
``weights on padded keys: max 0.31, want < 1e-6``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.core.outcomes import Failed, Interface
from grader.suite.handle import describe

__all__ = ["Failed", "Interface", "describe"]  # suites import them from here, with the helpers


@dataclass(frozen=True)
class Tolerance:
    """Elementwise closeness: |actual - expected| <= atol + rtol * |expected|."""

    rtol: float
    atol: float


# torch.testing.assert_close's defaults. No hidden test compares tighter than these for the
# dtype compared: correct code that adds things up in another order, or rounds a constant
# or its softmax to float32, stays within them; the smallest real bug is off by ~5e-2.
DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-5),
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
}


# Per device, where its kernels round differently from the CPU's (a GPU's matmul and
# softmax add up in other orders and fuse differently): these loosen the defaults above for
# their dtypes, and never tighten them. A dtype a device does not name keeps the default.
DEVICE_TOLERANCES: dict[str, dict[torch.dtype, Tolerance]] = {
    "cpu": {},
    "cuda": {torch.float32: Tolerance(rtol=1e-5, atol=1e-5)},
}
# Where the suite's calls run for the grading in progress; the tolerances follow it. A
# context variable, set by the pipeline for the length of one grading (`on_device`), so no
# grading leaves it set for the next.
_device: contextvars.ContextVar[str] = contextvars.ContextVar("grader_device", default="cpu")


@contextlib.contextmanager
def on_device(device: str) -> Iterator[None]:
    """Compare at `device`'s tolerances ("cpu", "cuda", "cuda:1": its kind) inside the
    block; the device before it is back after."""
    token = _device.set(str(device).partition(":")[0] or "cpu")
    try:
        yield
    finally:
        _device.reset(token)


def current_device() -> str:
    """The device whose tolerances `tolerance` uses now ("cpu" outside a grading)."""
    return _device.get()


def default_tolerance(dtype: torch.dtype, device: str | None = None) -> Tolerance:
    """`dtype`'s default (float32's for a dtype without one) on `device` (the current one
    unless given): assert_close's default, loosened where the device's table says so."""
    base = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[torch.float32])
    kind = (device or current_device()).partition(":")[0]
    extra = DEVICE_TOLERANCES.get(kind, {}).get(dtype)
    if extra is None:
        return base
    return Tolerance(rtol=max(base.rtol, extra.rtol), atol=max(base.atol, extra.atol))


def cuda_available() -> tuple[bool, str]:
    """Whether the suite's calls can run on a GPU here, and one plain line saying why not
    (or naming the GPU): "torch 2.13.0+cpu has no CUDA", "no GPU visible"."""
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} has no CUDA"
    if not torch.cuda.is_available():
        return False, "no GPU visible"
    try:
        return True, torch.cuda.get_device_name(0)
    except Exception as error:  # a driver that answers is_available but not this
        return False, f"no usable GPU ({type(error).__name__}: {error})"


def tolerance(
    *dtypes: torch.dtype, rtol: float | None = None, atol: float | None = None
) -> Tolerance:
    """The default tolerance of the least precise of `dtypes` on the current device
    (`default_tolerance`), loosened to `rtol` / `atol` where they are given; never tighter
    than the default."""
    default = max((default_tolerance(d) for d in dtypes), key=lambda t: t.rtol)
    return Tolerance(
        rtol=max(default.rtol, rtol or 0.0),
        atol=max(default.atol, atol or 0.0),
    )


def tolerance_ratio(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """|a - e| / (atol + rtol * |e|) elementwise, in float64: at most 1 is within `tol`."""
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    return (a - e).abs() / (tol.atol + tol.rtol * e.abs())


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _integral(t: torch.Tensor) -> bool:
    """An integer or bool tensor (what ids, indices and masks are)."""
    return not (t.is_floating_point() or t.is_complex())


def tensor(
    value: Any, what: str, shape: Sequence[int] | None = None, *, floating: bool = True
) -> torch.Tensor:
    """`value` must be a tensor (of `shape`, when given; real floating-point unless
    `floating` is False); returns it. Whatever the candidate's code gave back, call this
    before using it as a tensor: anything else fails the test, saying what came back."""
    if not isinstance(value, torch.Tensor):
        raise Interface(f"{what}: got {describe(value)}, want a torch.Tensor")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise Failed(f"{what} shape {tuple(value.shape)}, want {tuple(shape)}")
    if floating and value.dtype not in DEFAULT_TOLERANCES:  # float16, bfloat16, 32, 64
        raise Interface(f"{what} has dtype {_dtype(value)}, want a floating-point tensor")
    return value


def integers(value: Any, what: str, shape: Sequence[int] | None = None) -> torch.Tensor:
    """`value` must be an integer tensor (token ids, indices, counts; of `shape`, when
    given); returns it."""
    t = tensor(value, what, shape, floating=False)
    if not _integral(t) or t.dtype == torch.bool:
        raise Interface(f"{what} has dtype {_dtype(t)}, want an integer tensor")
    return t


def equal(actual: Any, expected: torch.Tensor, what: str) -> None:
    """`actual` is a tensor exactly equal to `expected` (same shape; values compared
    exactly: ids, masks, or floats that must not move at all). A float `expected` wants a
    float tensor, any other an integer or bool one. The message names the first element
    that differs and how many do."""
    floating = expected.is_floating_point()
    got = tensor(actual, what, expected.shape, floating=floating).detach()
    if not floating and not _integral(got):
        raise Interface(f"{what} has dtype {_dtype(got)}, want {_dtype(expected)}")
    common = torch.float64 if floating else torch.int64
    differs = got.to(common) != expected.detach().to(common)
    count = int(differs.sum())
    if count:
        at = tuple(int(i) for i in torch.nonzero(differs)[0])
        raise Failed(
            f"{what}: {count} of {differs.numel()} elements differ; first at {list(at)}: "
            f"got {got[at].item()!r}, want {expected[at].item()!r}"
        )


def data(actual: Any, expected: Any, what: str) -> None:
    """`actual` equals `expected`, plain data compared exactly (ints, strings, bytes, and
    lists, tuples and dicts of them): the message names the first place they differ."""
    where = _first_difference(actual, expected, "")
    if where is not None:
        path, got, want = where
        raise Failed(f"{what}{path}: got {got}, want {want}")


def _first_difference(actual: Any, expected: Any, path: str) -> tuple[str, str, str] | None:
    """(path, got, want) at the first place `actual` and `expected` differ, or None."""
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            return path, describe(actual), f"a {type(expected).__name__}"
        if len(actual) != len(expected):
            return path, f"{len(actual)} items", f"{len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            if (found := _first_difference(a, e, f"{path}[{i}]")) is not None:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return path, describe(actual), "a dict"
        if missing := [k for k in expected if k not in actual]:
            return path, f"no key {missing[0]!r}", f"{len(expected)} keys"
        if extra := [k for k in actual if k not in expected]:
            return path, f"an extra key {extra[0]!r}", f"{len(expected)} keys"
        for key, e in expected.items():
            if (found := _first_difference(actual[key], e, f"{path}[{key!r}]")) is not None:
                return found
        return None
    if type(actual) is not type(expected) and not (
        isinstance(actual, int) and isinstance(expected, int) and not isinstance(actual, bool)
    ):
        return path, describe(actual), f"a {type(expected).__name__} ({expected!r:.40})"
    if actual != expected:
        return path, f"{actual!r:.60}", f"{expected!r:.60}"
    return None


def pair(value: Any, what: str, names: tuple[str, str] = ("output", "weights")) -> tuple[Any, Any]:
    """`value` must be a 2-tuple (or list) of what `names` says, e.g. forward's (output,
    weights) or a cache's (k, v)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Interface(f"{what}: got {describe(value)}, want a pair ({', '.join(names)})")
    return value[0], value[1]


def is_none(value: Any, what: str) -> None:
    """`value` must be None."""
    if value is not None:
        raise Interface(f"{what}: got {describe(value)}, want None")


def finite(t: Any, what: str) -> None:
    """`t` is a floating-point tensor with no NaN or inf anywhere."""
    t = tensor(t, what)
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    if nan or inf:
        raise Failed(f"{what}: {nan} NaN and {inf} inf values out of {t.numel()}")


def small(t: Any, what: str, bound: float) -> None:
    """Every |entry| of `t` (a floating-point tensor) is below `bound`."""
    if tensor(t, what).numel() == 0:
        return
    finite(t, what)
    worst = float(t.abs().max())
    if not worst < bound:
        raise Failed(f"{what}: max {worst:.3g}, want < {bound:.0e}")


def close(
    actual: Any,
    expected: torch.Tensor,
    what: str,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    where: Any = None,  # a bool tensor (Any: suites pass their tolerances as **kwargs)
) -> None:
    """`actual` matches `expected` elementwise: |a - e| <= atol + rtol * |e|, at the default
    tolerance of the less precise of the two dtypes (`tolerance`), or looser where given;
    only where `where` (a bool tensor of their shape) is True, when given.

    The message names the element that breaks the tolerance the most (the largest ratio of
    its difference to the difference allowed there), not the largest absolute difference,
    by its index in every axis.
    """
    tensor(actual, what, floating=False)
    # `expected` may be another answer of the candidate's (`same`): checked like `actual`
    expected = tensor(expected, f"{what}, the value compared against").detach()
    actual = tensor(actual, what, expected.shape).detach()
    compared = torch.ones_like(expected, dtype=torch.bool)
    if where is not None:
        compared = compared & where.bool()
    finite(actual[compared], what)
    finite(expected[compared], f"{what}, the value compared against")
    tol = tolerance(actual.dtype, expected.dtype, rtol=rtol, atol=atol)
    ratio = tolerance_ratio(actual, expected, tol).masked_fill(~compared, 0.0)
    outside = int((ratio > 1).sum())
    if outside:
        at = tuple(int(i) for i in torch.unravel_index(ratio.argmax(), ratio.shape))
        got, want = float(actual[at]), float(expected[at])
        allowed = tol.atol + tol.rtol * abs(want)
        raise Failed(
            f"{what}: {outside} of {int(compared.sum())} elements outside the tolerance; worst at "
            f"{list(at)}: got {got:.8g}, want {want:.8g}, off by {abs(got - want):.3g} where "
            f"{allowed:.3g} is allowed (atol={tol.atol:.2g}, rtol={tol.rtol:.2g})"
        )


def same(actual: Any, expected: Any, what: str, *, atol: float | None = None) -> None:
    """Two outputs of the candidate that must agree, up to the dtype's default tolerance (or
    `atol`, where a test allows more); NaN or inf in either fails."""
    close(actual, expected, what, atol=atol)


def differ(a: Any, b: Any, what: str, at_least: float = 1e-4) -> None:
    """Two finite outputs (floating-point tensors) that must not be the same (NaN is not
    a difference; tensors of different shapes differ)."""
    finite(a, what)
    finite(b, f"{what}, the value compared against")
    if tuple(a.shape) != tuple(b.shape):
        return
    if a.numel() == 0:
        raise Failed(f"{what}: empty tensors {tuple(a.shape)}, want values that differ")
    if float((a - b).abs().max()) < at_least:
        raise Failed(
            f"{what}: max abs diff {float((a - b).abs().max()):.3g}, want >= {at_least:.0e}"
        )


def rows_sum_to_one(w: Any, what: str, atol: float = 1e-5) -> None:
    """Probabilities (a softmax, attention weights: a floating-point tensor): non-negative,
    summing to 1 over the last axis (within `atol`, and never tighter than the dtype's
    default tolerance). No rows at all pass."""
    finite(w, what)
    if w.numel() == 0:
        return
    tol = tolerance(w.dtype, atol=atol)
    bound = tol.atol + tol.rtol  # |expected| = 1
    low = float(w.min())
    if low < -bound:
        raise Failed(f"{what}: min {low:.3g}, want >= 0")
    sums = w.sum(dim=-1)
    worst = float((sums - 1).abs().max())
    if worst > bound:
        raise Failed(
            f"{what}: rows sum to between {float(sums.min()):.4g} and "
            f"{float(sums.max()):.4g}, want 1 (±{bound:.2g})"
        )
