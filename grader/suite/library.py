"""Checks and inputs any exercise can use, whatever its topic: seeded inputs, state-dict
loading, gradients against a float64 reference, causality, train/eval behaviour, exact
answers, and the from-scratch verdict. A suite imports it beside `checks`:

    from grader.suite import checks, library as lib

Everything here runs in the grader's process, with the grader's own torch; what reaches
the candidate's code goes through the `Kernel` handle (a `Remote` is called like a
function). The helpers fail with `checks.Failed` (a wrong answer) or `checks.Interface`
(an answer of the wrong kind), one line each, as `checks` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from grader.core.outcomes import CandidateRaised
from grader.suite import checks
from grader.suite.checks import Failed
from grader.suite.integrity import require_clean_source, require_nothing_seen

F32, F64 = torch.float32, torch.float64


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = F32) -> torch.Tensor:
    """Reproducible normal noise, independent of the global RNG (drawn in float64, then
    cast: the same values, rounded, in every dtype)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64).mul(scale).to(dtype)


def randint(low: int, high: int, *shape: int, seed: int) -> torch.Tensor:
    """Reproducible int64 values in [low, high) (token ids, targets, positions)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=torch.int64)


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values as `t` in a layout no `.view` that merges axes accepts: its axes
    stored in reverse order (column-major), and the last one at stride 2 besides. Code that
    assumes contiguous strides fails on it: ``x.view(-1, x.shape[-1])``, ``x.view(-1)``, a
    transpose's ``.view`` (`reshape` and `contiguous` work)."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    wide[..., ::2] = t
    if t.dim() > 1:
        order = list(range(t.dim()))[::-1]
        wide = wide.permute(order).contiguous().permute(order)
    view = wide[..., ::2]
    assert not view.is_contiguous() or t.shape[-1] <= 1
    return view


def exactly_zero(t: Any, what: str) -> None:
    """Every entry of `t` (a floating-point tensor) is exactly 0 (and none is NaN)."""
    checks.finite(t, what)
    if t.numel() and float(t.abs().max()) != 0:
        raise Failed(f"{what}: max {float(t.abs().max()):.3g}, want exactly 0")


def state_dict(module: Any, owner: str) -> dict[Any, Any]:
    """A candidate module's whole state_dict(), which must be a dict (of anything)."""
    state = module.state_dict()
    if not isinstance(state, dict):
        raise checks.Interface(f"{owner}.state_dict(): got {checks.describe(state)}, want a dict")
    return state


def require_state(
    state: Any,
    names: list[str],
    owner: str,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, torch.Tensor]:
    """The named tensors from a candidate's state_dict, or an Interface failure naming
    what is missing; those of them `shapes` names must be floating-point tensors of that
    shape (the suite computes its reference from them)."""
    if not isinstance(state, dict):
        raise checks.Interface(f"{owner}.state_dict(): got {checks.describe(state)}, want a dict")
    if missing := [n for n in names if not isinstance(state.get(n), torch.Tensor)]:
        listed = ", ".join(missing[:4]) + (f" (+{len(missing) - 4} more)" if missing[4:] else "")
        raise checks.Interface(f"{owner}.state_dict() has no {listed}: keep the scaffold's layers")
    for name, want in ((n, tuple(shapes[n])) for n in names if shapes and n in shapes):
        got = tuple(checks.tensor(state[name], f"{owner}.state_dict()[{name!r}]").shape)
        if got != want:
            raise checks.Interface(f"{owner}: {name} has shape {got}, want {want}")
    return {n: state[n] for n in names}


def load_state(module: Any, owner: str, tensors: dict[str, torch.Tensor]) -> None:
    """Overwrite some of a candidate module's tensors (``load_state_dict(strict=False)``);
    each must exist in its state_dict."""
    answer = module.load_state_dict(tensors, strict=False)
    pair = isinstance(answer, (tuple, list)) and len(answer) == 2
    unknown = [str(k) for k in answer[1]] if pair and isinstance(answer[1], (list, tuple)) else []
    if unknown:
        raise checks.Interface(f"{owner}.state_dict() has no {', '.join(unknown[:4])} to load into")


def gradients_match(
    kernel: Any,
    remote: Any,
    args: Sequence[Any],
    reference: Callable[..., torch.Tensor],
    wrt: Sequence[int],
    what: str,
    *,
    kwargs: dict[str, Any] | None = None,
    names: Sequence[str] | None = None,
    output_path: Sequence[int] = (),
    seed: int = 2,
) -> None:
    """d(sum(y * r)) / d(args[i]) for each i in `wrt`, where y = remote(*args, **kwargs)
    (the `output_path` item of what it returns) and r is seeded noise, match the same
    gradients of `reference` (a function of the grader's, same arguments, returning y)
    computed by autograd. Give float64 arguments: the comparison is at float64's default
    tolerance."""
    kwargs = kwargs or {}
    leaves = [a.detach().clone().requires_grad_(i in wrt) if torch.is_tensor(a) else a
              for i, a in enumerate(args)]  # fmt: skip
    y = reference(*leaves, **kwargs)
    r = randn(*y.shape, seed=seed, dtype=y.dtype)
    (y * r).sum().backward()
    grads = kernel.grad(
        remote, tuple(args), kwargs, wrt=list(wrt), cotangent=r,
        output_path=list(output_path), params=False,
    )  # fmt: skip
    names = names or [f"argument {i}" for i in wrt]
    for name, i, g in zip(names, wrt, grads["inputs"], strict=True):
        got = checks.tensor(g, f"gradient of {what} w.r.t. {name}", args[i].shape)
        want = leaves[i].grad
        assert want is not None, f"the reference does not depend on {name}"
        checks.close(got, want, f"gradient of {what} w.r.t. {name} vs autograd")


def causal(
    call: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    what: str,
    *,
    t: int = 2,
    dim: int = 1,
    seed: int = 9,
) -> None:
    """`call(x)` is causal along `dim`: its outputs at positions <= t do not move when the
    inputs after t change, and later ones do (so a constant output does not pass)."""
    later = x.clone()
    tail = later.narrow(dim, t + 1, x.shape[dim] - t - 1)
    tail += randn(*tail.shape, seed=seed, scale=3.0, dtype=x.dtype)
    y1, y2 = (_along(call(v), what, dim, x.shape[dim]) for v in (x, later))
    head = f"{what}[..{t}] after changing inputs after t={t}"
    checks.same(y2.narrow(dim, 0, t + 1), y1.narrow(dim, 0, t + 1), head)
    rest = f"{what} after t={t} (must change with its own inputs)"
    checks.differ(y2.narrow(dim, t + 1, x.shape[dim] - t - 1),
                  y1.narrow(dim, t + 1, x.shape[dim] - t - 1), rest)  # fmt: skip


def _along(y: Any, what: str, dim: int, length: int) -> torch.Tensor:
    """`y` as a floating-point tensor of `length` positions along `dim`, else a failure."""
    y = checks.tensor(y, what)
    if y.dim() <= dim or y.shape[dim] != length:
        raise Failed(f"{what} shape {tuple(y.shape)}, want {length} positions on axis {dim}")
    return y


def eval_mode_is_deterministic(
    module: Any, call: Callable[[Any], torch.Tensor], plain: torch.Tensor, what: str
) -> None:
    """In eval mode, `call(module.seeded(s))` gives the same output under two RNG seeds,
    and the same as `plain` (the output without the random part, e.g. dropout 0)."""
    module.eval()
    first, second = call(module.seeded(1)), call(module.seeded(2))
    checks.same(first, plain, f"eval-mode {what} vs no randomness")
    checks.same(second, first, f"two eval-mode {what}s (RNG seeds 1, 2)")


def train_mode_differs(module: Any, call: Callable[[Any], torch.Tensor], what: str) -> None:
    """In train mode the output is finite and differs from eval mode's (dropout is on)."""
    module.eval()
    y_eval = call(module)
    module.train()
    y_train = call(module.seeded(3))
    checks.finite(y_train, f"train-mode {what}")
    checks.differ(y_train, y_eval, f"train-mode {what} vs eval mode")


def raises(call: Callable[..., Any], args: Sequence[Any], expected: str, what: str) -> None:
    """`call(*args)` (a Remote) raises an exception whose type is named `expected`
    ("ValueError"), as the statement asks for bad input; returning, or raising another
    type, fails. A stub's NotImplementedError and an interface error (a name the notebook
    does not define, a signature the call does not fit) pass through as themselves."""
    try:
        got = call(*args)
    except CandidateRaised as error:
        if error.not_implemented or error.interface:
            raise
        if error.type != expected:
            raise Failed(f"{what}: raised {error.type}, want {expected}") from None
        return
    raise Failed(f"{what}: returned {checks.describe(got)}, want {expected}")


def no_builtin(kernel: Any, exercise: Any, run: Callable[[], Any] | None = None) -> None:
    """The from-scratch verdict: after `run()` (calls that exercise the candidate's code),
    the notebook's source binds none of the exercise's forbidden names and no watched
    built-in ran during the hidden tests."""
    if run is not None:
        run()
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)
    require_nothing_seen(kernel.seen)
