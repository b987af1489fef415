"""What a hidden test holds: proxies for the candidate's objects, living in the kernel.

A test writes ordinary-looking code (``mha = kernel.new("MultiHeadAttention", cfg)``,
``y, w = mha(x, need_weights=True)``); each call travels to the kernel through the shim
and its result comes back as tensors and plain data. Exceptions from candidate code come
back as `CandidateRaised`, never as exceptions of the candidate's own classes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from grader.core.outcomes import CandidateRaised, Interface, NoAnswer
from grader.core.records import Finding
from grader.kernel.channel import Request


class Calls(Protocol):
    """What a `Kernel` needs of the session it talks through (`grader.kernel.Session`, or
    a stand-in in tests): the cells' sources, the guard's records, and calls."""

    @property
    def sources(self) -> list[tuple[int, str]]: ...

    @property
    def seen(self) -> set[str]: ...

    @property
    def findings(self) -> list[Finding]: ...

    def call(self, request: Request, timeout: float | None = None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Foreign:
    """A value of a type that does not cross the wire (a NumPy array, say)."""

    type: str
    text: str = ""


class ModuleEntry(tuple):
    """A submodule as the pair (name, type), with `bases`: the qualified names of every type
    its class derives from (its own first)."""

    bases: tuple[str, ...]

    def __new__(cls, name: str, kind: str, bases: tuple[str, ...] = ()) -> ModuleEntry:
        entry = super().__new__(cls, (name, kind))
        entry.bases = bases or (kind,)
        return entry


@dataclass(frozen=True)
class Step:
    """One request of a `Kernel.batch`, with how its errors name it (`label`). Made by
    `call_step`, `attribute_step`, `set_step` and `hold_step`."""

    request: Request
    label: str


def call_step(remote: Remote, method: str | None = None, *args: Any, **kwargs: Any) -> Step:
    """``remote.method(*args, **kwargs)`` (or ``remote(...)``) as a step of a batch."""
    label = f"{remote.label}.{method}" if method else remote.call_label
    return Step(_request(remote.target, method, args, kwargs, remote.seed), label)


def attribute_step(remote: Remote, name: str) -> Step:
    """Reading ``remote.name`` as a step of a batch (see `Kernel.attribute`)."""
    return Step(
        {"op": "attribute", "target": remote.target, "name": name}, f"{remote.label}.{name}"
    )


def set_step(remote: Remote, name: str, value: Any) -> Step:
    """``remote.name = value`` as a step of a batch (see `Kernel.set_attribute`); it
    answers None."""
    request: Request = {"op": "set", "target": remote.target, "name": name, "value": _wire(value)}
    return Step(request, f"{remote.label}.{name}")


def hold_step(value: Any, label: str = "value") -> Step:
    """Keeping `value` in the kernel as a step of a batch (see `Kernel.hold`): it answers
    a Remote."""
    return Step({"op": "hold", "value": _wire(value)}, label)


class Kernel:
    """The suite's handle on the candidate's kernel."""

    def __init__(self, session: Calls) -> None:
        self.session = session

    @property
    def sources(self) -> list[str]:
        """The source of every code cell in the notebook, each knowing its cell's number as
        the report numbers it (`CellSource.number`), which the scan's messages use."""
        from grader.suite.scan import CellSource

        return [CellSource(source, index + 1) for index, source in self.session.sources]

    @property
    def cell_numbers(self) -> list[int]:
        """Each code cell's number in the notebook, in `sources`' order (all cells count,
        from 1: the numbering of every place the report names a cell)."""
        return [index + 1 for index, _ in self.session.sources]

    @property
    def seen(self) -> set[str]:
        """The evidence against the from-scratch level so far (`records.EVIDENCE`): watched
        built-ins the graded calls ran, programs that worked while they ran, and the
        machinery that can switch the watch off (gc walks, ctypes, tracing). Notes (a
        shell command, a thread, a program that sat idle) are not in it."""
        return {f.message for f in self.session.findings if f.is_evidence}

    def get(self, name: str) -> Remote:
        """A top-level name from the candidate's notebook (class, function, value)."""
        return Remote(self, {"__global__": name}, name)

    def new(self, class_name: str, *args: Any, seed: int | None = 0, **kwargs: Any) -> Remote:
        """Construct a candidate class; torch is seeded first so weights are reproducible.
        It is built on the CPU (the same weights whatever the device) and a module is then
        moved to the grading's device (`Limits.device`).

        Raises:
            Interface: what the name gave is plain data (a number, None, a tensor, a list),
                not an object that stays in the kernel.
        """
        request = _request({"__global__": class_name}, None, args, kwargs, seed)
        request["construct"] = True
        built = self._answer(request, class_name)
        if not isinstance(built, Remote):  # the name is bound to something else than a class
            raise Interface(f"{class_name}(...) gave {describe(built)}, want an object")
        return built

    def call(
        self,
        target: dict[str, Any],
        method: str | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        label: str,
        seed: int | None = None,
    ) -> Any:
        """Call `target.method(*args, **kwargs)` (or `target(...)`) in the kernel."""
        return self._answer(_request(target, method, args, kwargs, seed), label)

    def many(self, remote: Remote, calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list:
        """Call `remote` once per (args, kwargs) in `calls`, all in one request, and return
        the results in order (the kernel stops at the first call that raises, which is
        raised here as `CandidateRaised`)."""
        label = remote.call_label
        steps = [Step(_request(remote.target, None, a, k, remote.seed), label) for a, k in calls]
        return self.batch(steps)

    def batch(self, steps: Sequence[Step]) -> list:
        """Every step (calls, attribute reads and sets, holds: `call_step`, ...) in one
        round trip, in order; their answers in order. A stateful run, such as an optimizer
        stepped many times with gradients set between the steps, costs one request. The
        kernel stops at the first step that raises, raised here as `CandidateRaised`."""
        if not steps:
            return []
        answer = self.session.call({"op": "batch", "requests": [s.request for s in steps]})
        answers = answer.get("answers")
        if not isinstance(answers, list) or not answers or len(answers) > len(steps):
            raise NoAnswer("a batch answered with something else")
        results = []
        for item, step in zip(answers, steps, strict=False):
            if not isinstance(item, dict):
                raise NoAnswer("a batch answered with something else")
            if "raised" in item:
                raise CandidateRaised(step.label, item["raised"])
            value = self._unwire(item.get("value"), step.label)
            if step.request.get("op") == "hold":
                if not isinstance(value, Remote):
                    raise NoAnswer("a hold answered with something else")
                value.label = step.label
            results.append(value)
        if len(results) < len(steps):
            raise NoAnswer("a batch answered fewer calls than it asked")
        return results

    def grad(
        self,
        remote: Remote,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        wrt: list[int],
        cotangent: torch.Tensor,
        output_path: Sequence[int] = (),
        params: bool = True,
    ) -> dict[str, Any]:
        """Backpropagate ``sum(output * cotangent)`` through ``remote(*args)``.

        `output_path` picks the output to differentiate (``[0]`` for the first of a
        tuple); `params=False` for a plain function, which has no parameters.
        Returns ``{"inputs": [grad per index in wrt], "params": {name: grad or None}}``.
        """
        request: Request = {
            "op": "grad",
            "target": remote.target,
            "method": None,
            "args": _wire(list(args)),
            "kwargs": _wire(kwargs),
            "wrt": list(wrt),
            "cotangent": cotangent,
            "output_path": list(output_path),
            "params_of": remote.target if params else None,
            "seed": 0,
        }
        return self._answer(request, f"{remote.label}.forward (backward pass)")

    def attribute(self, remote: Remote, name: str) -> Any:
        """The value of `remote.name` (a stateful object's field or property, such as a
        cache's length), read in the kernel; a property runs under the watch like a call."""
        step = attribute_step(remote, name)
        return self._answer(step.request, step.label)

    def set_attribute(self, remote: Remote, name: str, value: Any) -> None:
        """Set `remote.name = value` in the kernel (a tensor's ``grad``, an object's field);
        a property's setter runs under the watch like a call."""
        step = set_step(remote, name, value)
        self._answer(step.request, step.label)

    def hold(self, value: Any, label: str = "value") -> Remote:
        """Send `value` (tensors and plain data) to the kernel and keep it there as an
        object, returned as a Remote: a tensor the candidate's code then changes in place
        (a parameter an optimizer steps), or one object several calls share. Reading it
        back: `attribute(remote, "data")`, or a method call that returns a copy."""
        (held,) = self.batch([hold_step(value, label)])
        return held

    def modules(self, remote: Remote) -> list[ModuleEntry]:
        """(name, type) of every submodule of a candidate nn.Module; each entry's `bases`
        names the types it derives from."""
        request: Request = {"op": "modules", "target": remote.target}
        entries = []
        for item in self._answer(request, remote.label):
            name, kind = str(item[0]), str(item[1])
            bases = item[2] if len(item) > 2 and isinstance(item[2], list) else [kind]
            entries.append(ModuleEntry(name, kind, tuple(str(b) for b in bases)))
        return entries

    def profile(
        self,
        remote: Remote,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        repeat: int = 5,
        warmup: int = 1,
        budget: float = 1.0,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Time ``remote(*args, **kwargs)`` in the kernel, on the grading's device, without
        autograd or the watch: `warmup` calls, then up to `repeat` timed ones (at least one;
        no more once `budget` seconds have gone on them), then one more for its peak memory.
        The output never crosses the channel. `timeout`: the limit for the whole request
        (else the call limit).

        Returns ``{"times": [seconds...], "peak_bytes": int, "threads": int}`` (the torch
        threads the kernel ran it with).

        Raises:
            CandidateRaised: the call raised (at any of its runs).
            NoAnswer: the kernel answered with something else.
        """
        request: Request = {
            "op": "profile",
            "target": remote.target,
            "method": None,
            "args": _wire(list(args)),
            "kwargs": _wire(kwargs),
            "seed": remote.seed,
            "repeat": int(repeat),
            "warmup": int(warmup),
            "budget": float(budget),
        }
        answer = self.session.call(request, timeout)
        if "raised" in answer:
            raise CandidateRaised(remote.call_label, answer["raised"])
        return _measurement(answer.get("value"))

    def _answer(self, request: Request, label: str) -> Any:
        answer = self.session.call(request)
        if "raised" in answer:
            raise CandidateRaised(label, answer["raised"])
        return self._unwire(answer.get("value"), label)

    def _unwire(self, value: Any, label: str) -> Any:
        if isinstance(value, dict):
            if "__ref__" in value:
                return Remote(
                    self, {"__ref__": value["__ref__"]}, label, str(value.get("type", ""))
                )
            if "__foreign__" in value:
                return Foreign(str(value["__foreign__"]), str(value.get("repr", "")))
            return {key: self._unwire(item, label) for key, item in value.items()}
        if isinstance(value, list):
            return [self._unwire(item, label) for item in value]
        if isinstance(value, tuple):
            return tuple(self._unwire(item, label) for item in value)
        return value


class Remote:
    """A candidate object in the kernel; calling it or its methods runs candidate code."""

    def __init__(
        self,
        kernel: Kernel,
        target: dict[str, Any],
        label: str,
        type_name: str = "",
        seed: int | None = None,
    ) -> None:
        self.kernel = kernel
        self.target = target
        self.label = label
        self.type_name = type_name
        self.seed = seed

    def seeded(self, seed: int) -> Remote:
        """This object, with torch seeded before each of its calls (so that what dropout
        draws in train mode is reproducible): ``mha.seeded(3)(x)``."""
        return Remote(self.kernel, self.target, self.label, self.type_name, seed)

    @property
    def call_label(self) -> str:
        """How a call of this object is named in messages (a module's is its forward)."""
        return self.label if "." in self.label or not self.type_name else f"{self.label}.forward"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.kernel.call(self.target, None, args, kwargs, self.call_label, seed=self.seed)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            label = f"{self.label}.{name}"
            return self.kernel.call(self.target, name, args, kwargs, label, seed=self.seed)

        return method

    def __repr__(self) -> str:
        return f"<remote {self.label}>"


def _request(
    target: dict[str, Any],
    method: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    seed: int | None,
) -> Request:
    return {
        "op": "call",
        "target": target,
        "method": method,
        "args": _wire(list(args)),
        "kwargs": _wire(kwargs),
        "seed": seed,
    }


def _wire(value: Any) -> Any:
    """Turn Remotes into references the shim can resolve; leave data alone."""
    if isinstance(value, Remote):
        return value.target
    if isinstance(value, (list, tuple)):
        items = [_wire(item) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {key: _wire(item) for key, item in value.items()}
    return value


def describe(value: Any) -> str:
    """What a value the candidate's code gave back is, in a few words, for a message that
    says what came back: "None", "a float (0.6931)", "a float64 tensor of shape (8,)",
    "a list of 3", "a numpy.ndarray", "a KVCache object" (an object still in the kernel)."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        shape = f"{_a(dtype)} tensor of shape {tuple(value.shape)}"
        if value.dim() or value.is_complex():
            return shape
        item = value.item()
        return f"{shape} ({item:.6g})" if isinstance(item, float) else f"{shape} ({item!r})"
    if isinstance(value, (tuple, list, dict)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, Foreign):
        return _a(value.type)
    if isinstance(value, Remote):  # the notebook's own classes are __main__'s
        return f"{_a(value.type_name.removeprefix('__main__.') or 'Python')} object"
    if isinstance(value, float):
        return f"a float ({value:.6g})"
    return f"{_a(type(value).__name__)} ({value!r:.40})"


def _a(word: str) -> str:
    """`word` after its article: "an int64", "a float32"."""
    return f"{'an' if word[:1].lower() in ('a', 'e', 'i', 'o', 'u') else 'a'} {word}"


def _measurement(value: Any) -> dict[str, Any]:
    """A profile answer as plain numbers, or NoAnswer (the kernel is the candidate's: it
    may send anything)."""
    if not isinstance(value, dict):
        raise NoAnswer("a profile answered with something else")
    times: Any = value.get("times")
    peak: Any = value.get("peak_bytes")
    threads: Any = value.get("threads")
    if (
        not isinstance(times, list)
        or not times
        or not all(_number(t) and t >= 0 for t in times)
        or not _number(peak)
        or not _number(threads)
    ):
        raise NoAnswer("a profile answered with something else")
    return {"times": [float(t) for t in times], "peak_bytes": int(peak), "threads": int(threads)}


def _number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
