"""How the adamw suite steps an optimizer: the same scenario (`Run`) in the candidate's
kernel (`Run.on`) and here, in the grader's process, with torch's AdamW update
(`Run.reference`).

In the kernel: the parameters are held there (the optimizer updates them in place, in
their own layout), the candidate's class is built over them (param groups as dicts of
Remotes), and ONE `Kernel.batch` then makes every step: set each parameter's `grad` (None
where the step gives it none), call `step()`, and now and then read the parameters back.
A run with `edits` changes a param group's hyperparameters between steps as a scheduler
does (`opt.param_groups[i]["lr"] = ...`): its group dicts are held in the kernel too, and
the optimizer keeps the dicts it is given (torch.optim.Optimizer does), so an edit of a
held dict is an edit of `opt.param_groups[i]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim.adam import _single_tensor_adam

from grader.suite import checks
from grader.suite.handle import Remote, Step, attribute_step, call_step, hold_step, set_step

CLASS = "AdamW"
DEFAULTS: dict[str, Any] = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}


@dataclass
class Trajectory:
    """What a run left: the parameters after the steps read (`after[t][name]`, t from 1),
    what each step() returned, the state by parameter name (when asked for), and the
    extra attributes of the first parameter read at the end."""

    after: dict[int, dict[str, torch.Tensor]]
    returned: list[Any] = field(default_factory=list)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: list[Any] = field(default_factory=list)
    groups: Any = None  # opt.param_groups at the end, for a run with edits


@dataclass
class Run:
    """A scenario: the parameters (name -> initial value), each step's gradients (a name
    a step leaves out has grad None then), the constructor's keyword arguments and,
    optionally, param groups as {"params": [names], **options}, and `edits`: before step t,
    group i's entries are updated with `edits[t][i]` (a scheduler's changes)."""

    params: dict[str, torch.Tensor]
    grads: list[dict[str, torch.Tensor]]
    options: dict[str, Any] = field(default_factory=dict)
    groups: list[dict[str, Any]] | None = None
    edits: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)

    def argument(self, tensors: dict[str, Any]) -> list:
        """The optimizer's `params` argument, over `tensors` (by name)."""
        if self.groups is None:
            return list(tensors.values())
        return [{**g, "params": [tensors[n] for n in g["params"]]} for g in self.groups]

    @property
    def order(self) -> list[str]:
        """Parameter names in the optimizer's order (state_dict numbers them so)."""
        if self.groups is None:
            return list(self.params)
        return [n for g in self.groups for n in g["params"]]

    def on(
        self, kernel: Any, *, state: bool = False, every: int = 1, reads: tuple[str, ...] = ()
    ) -> Trajectory:
        """Run it in the kernel in three round trips (hold, construct, steps). The
        parameters are read after every `every`-th step and the last; `reads`: attributes
        of the first parameter read at the end; `state`: read state_dict() at the end."""
        held = hold(kernel, self.params)
        argument: list = self.argument(held)
        if self.edits:  # the group dicts themselves held, to be edited between steps
            if self.groups is None:
                argument = [{"params": argument}]
            argument = kernel.batch([hold_step(g, f"param_groups[{i}]")
                                     for i, g in enumerate(argument)])  # fmt: skip
        opt = kernel.new(CLASS, argument, seed=None, **self.options)
        # each request with what its answer is: ("set", None) answers are not read
        steps: list[tuple[Step, tuple[str, Any]]] = [
            (set_step(r, "requires_grad", True), ("set", None)) for r in held.values()
        ]
        for t, grads in enumerate(self.grads, start=1):
            for i, changes in self.edits.get(t, {}).items():
                steps.append((call_step(argument[i], "update", changes), ("set", None)))
            steps += [(set_step(r, "grad", grads.get(n)), ("set", None)) for n, r in held.items()]
            steps.append((call_step(opt, "step"), ("returned", t)))
            if t % every == 0 or t == len(self.grads):
                steps += [(attribute_step(r, "data"), ("after", (t, n))) for n, r in held.items()]
        first = next(iter(held.values()))
        steps += [(attribute_step(first, name), ("extra", name)) for name in reads]
        if state:
            steps.append((call_step(opt, "state_dict"), ("state", None)))
        if self.edits:
            steps.append((attribute_step(opt, "param_groups"), ("groups", None)))
        out = Trajectory({})
        answers = kernel.batch([step for step, _ in steps])
        for (_, (kind, key)), value in zip(steps, answers, strict=True):
            if kind == "returned":
                out.returned.append(value)
            elif kind == "after":
                out.after.setdefault(key[0], {})[key[1]] = value
            elif kind == "extra":
                out.extra.append(value)
            elif kind == "state":
                out.state = _unpack_state(value, self.order)
            elif kind == "groups":
                out.groups = value
        return out

    def reference(self, decoupled: bool = True) -> Trajectory:
        """The same run here, with torch.optim.AdamW's update (`decoupled=False` with
        weight_decay 0: torch.optim.Adam's), every step read."""
        tensors = {n: copy(p) for n, p in self.params.items()}
        groups = self.argument(tensors) if self.groups else [{"params": list(tensors.values())}]
        groups = [{**DEFAULTS, **self.options, **g} for g in groups]
        state: dict[int, dict[str, torch.Tensor]] = {}
        out = Trajectory({})
        for t, grads in enumerate(self.grads, start=1):
            for i, changes in self.edits.get(t, {}).items():
                groups[i].update(changes)
            grad_of = {id(tensors[n]): g for n, g in grads.items() if g is not None}
            for group in groups:
                torch_step(group, grad_of, state, decoupled)
            out.after[t] = {n: p.clone() for n, p in tensors.items()}
        out.state = {n: state[id(p)] for n, p in tensors.items() if id(p) in state}
        return out


def torch_step(group: dict, grad_of: dict, state: dict, decoupled: bool = True) -> None:
    """One step of one param group with the function torch.optim.AdamW.step runs for CPU
    tensors (`torch.optim.adam._single_tensor_adam`: foreach and fused are off on the CPU),
    called directly: AdamW.step imports torch._dynamo on first use, seconds of the first
    grading. Parameters without a gradient are skipped, as torch's step skips them."""
    params = [p for p in group["params"] if id(p) in grad_of]
    for p in params:
        if id(p) not in state:
            zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
            state[id(p)] = {"step": torch.tensor(0.0), "exp_avg": zeros,
                            "exp_avg_sq": zeros.clone()}  # fmt: skip
    entries = [state[id(p)] for p in params]
    beta1, beta2 = group["betas"]
    _single_tensor_adam(
        params, [grad_of[id(p)].clone() for p in params], [e["exp_avg"] for e in entries],
        [e["exp_avg_sq"] for e in entries], [], [e["step"] for e in entries], None, None,
        amsgrad=False, has_complex=False, beta1=beta1, beta2=beta2, lr=group["lr"],
        weight_decay=group["weight_decay"], eps=group["eps"], maximize=False, capturable=False,
        differentiable=False, decoupled_weight_decay=decoupled,
    )  # fmt: skip


def copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` in its own layout (strides): a non-contiguous parameter stays so
    (`clone` makes a copy of a strided view contiguous)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


def hold(kernel: Any, tensors: dict[str, torch.Tensor]) -> dict[str, Remote]:
    """Each tensor (a copy, in its layout) kept in the kernel as an object, in one round
    trip."""
    held = kernel.batch([hold_step(copy(t), name) for name, t in tensors.items()])
    return dict(zip(tensors, held, strict=True))


def _unpack_state(packed: Any, order: list[str]) -> dict[str, dict[str, Any]]:
    """state_dict()["state"] by parameter name (it numbers parameters in group order);
    empty entries left out."""
    if not isinstance(packed, dict) or not isinstance(packed.get("state"), dict):
        raise checks.Interface(
            f"{CLASS}.state_dict(): got {checks.describe(packed)}, want torch's layout (a "
            "dict whose 'state' is a dict)"
        )
    state = {}
    for index, entry in packed["state"].items():
        if not isinstance(index, int) or not 0 <= index < len(order):
            raise checks.Interface(f"{CLASS}.state_dict()['state'] has a key {index!r}")
        if not isinstance(entry, dict):
            raise checks.Interface(f"{CLASS}.state_dict()['state'][{index}] is not a dict")
        if entry:
            state[order[index]] = entry
    return state


def same_run(got: Trajectory, want: Trajectory, what: str, **tol: float) -> None:
    """The parameters after every step read match the reference's; the message names the
    first step that breaks the tolerance (checks.close's, loosened by `tol`)."""
    for t in sorted(got.after):
        for name, expected in want.after[t].items():
            checks.close(got.after[t].get(name), expected, f"{name} after step {t} ({what})",
                         **tol)  # fmt: skip
