"""An in-process stand-in for the candidate's kernel, for tests and suite authors.

`InProcessSession` runs a notebook's code cells in a namespace of this process and answers
the suite's calls with the shim's own `respond`. Requests and answers are copied as the wire
carries them: tensors (detached copies), numbers, strings, None, dtypes and sizes, and
lists, tuples and dicts of them; anything else is refused, as ``torch.load(weights_only=
True)`` refuses it in the grader. The runner, remote objects, shim and every exercise's
checks then run in milliseconds, with no Jupyter.

It is not a sandbox and has no limits: no timeouts, no memory cap, no guard (only the
shim's per-thread watch of the exercise's torch functions and aten ops). Use it for code
you trust, such as solutions and their mutants; grading a candidate's notebook always
takes a real kernel (`grader.kernel.Session`).
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import types
import warnings
from typing import Any

import torch

from grader.core.limits import Limits
from grader.core.outcomes import Status
from grader.core.records import Finding, Kind
from grader.kernel import CellRun
from grader.kernel.channel import Request
from grader.kernel.launch import SHIM_SOURCE
from grader.kernel.wire import _span


class InProcessSession:
    """A kernel's place in `grader.suite.handle.Kernel`, played by this process (see module)."""

    def __init__(self, sources: list[tuple[int, str]], limits: Limits | None = None) -> None:
        self.sources = sources
        self.limits = limits or Limits()
        self.cells: list[CellRun] = []
        self.restarts = 0
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.calls = 0
        self.deadline = float("inf")  # no limits: see the module docstring
        self._seen: set[str] = set()
        # the kernel's shim, compiled as in the kernel (its frames are the grader's own)
        self._shim = types.ModuleType("_grader_shim_in_process")
        exec(_shim_code(), self._shim.__dict__)
        self._modes = self._watch(frozenset(), ())

    @property
    def seen(self) -> set[str]:
        """Watched built-ins called during calls so far."""
        return set(self._seen)

    @property
    def findings(self) -> list[Finding]:
        """What the watch saw, as the guard would report it."""
        return [Finding(Kind.BUILTIN, name) for name in sorted(self._seen)]

    def assign(self, sources: list[tuple[int, str]], deadline: float) -> None:
        """Take the notebook's cells (the pipeline's call; the deadline is not enforced)."""
        self.sources = sources

    def forget_objects(self) -> None:
        """Let go of every object the shim handed the suite (a kernel keeps them until it is
        shut down, after one grading): for tests that run a suite many times in one
        session. A Remote made before must not be used again."""
        self._shim._objects.clear()

    def end_tests(self) -> None:
        """The hidden tests are over (nothing to stop in this process)."""

    def close(self) -> None:
        """Nothing to close: the namespace goes with the object."""

    def prepare(self, watch: dict[str, Any] | None = None, packages: tuple[str, ...] = ()) -> None:
        """Watch what `watch` (an exercise's `Watch.kernel_config()`) names, run its setup,
        then run the cells in order; a cell that raises is recorded and the rest still run."""
        watch = watch or {}
        functions, ops = frozenset(watch.get("functions", ())), tuple(watch.get("ops", ()))
        self._modes = self._watch(functions, ops)
        if watch.get("setup"):
            exec(compile(str(watch["setup"]), "<grader-exercise-setup>", "exec"), {})
        self.cells = [self._run_cell(index, source) for index, source in self.sources]

    def _watch(self, functions: frozenset[str], ops: tuple[str, ...]) -> tuple[Any, ...]:
        """The shim's modes, and no allow-list (there is no guard here: the function mode's
        test of who called a private torch function says "not the notebook", and no trace
        function is set)."""
        modes = self._shim._modes(self._record, functions, ops, lambda frame: False)
        return (*modes, contextlib.nullcontext)

    def call(self, request: Request, timeout: float | None = None) -> dict[str, Any]:
        """Answer one request as the shim in a kernel would (`timeout` is not enforced)."""
        self.calls += 1
        with _as_in_a_kernel():
            answer = self._shim.respond(_wire(dict(request)), self.namespace, self._modes)
        reply = _wire(answer)
        if not isinstance(reply, dict):
            raise TypeError("the shim answered with something other than a dict")
        return reply

    def __enter__(self) -> InProcessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _record(self, kind: str, message: str) -> None:
        if kind == "builtin":
            self._seen.add(message)

    def _run_cell(self, index: int, source: str) -> CellRun:
        filename = f"<notebook cell {index + 1}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            with _as_in_a_kernel():
                exec(compile(source, filename, "exec"), self.namespace)
        except Exception as error:
            return CellRun(index, Status.ERROR, f"{type(error).__name__}: {error}")
        return CellRun(index, Status.PASSED)


@contextlib.contextmanager
def _as_in_a_kernel() -> Any:
    """Warnings as a kernel treats them (shown, never raised): a process whose filters turn
    them into errors (pytest's, this project's) would otherwise fail the candidate's code,
    or the shim's, where a kernel would not (autograd warns when a non-leaf's `.grad` is
    read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@functools.cache
def _shim_code() -> types.CodeType:
    """The guard and the shim, compiled once per process as the kernel compiles them."""
    with warnings.catch_warnings():  # the guard's code template calls a constant
        warnings.simplefilter("ignore", SyntaxWarning)
        return compile(SHIM_SOURCE, "<grader-shim>", "exec")


_PLAIN = (type(None), bool, int, float, str, bytes, torch.dtype, torch.Size)


def _wire(value: Any, depth: int = 0) -> Any:
    """`value` after a trip over the wire (a copy of plain data and tensors).

    Raises:
        TypeError: a value the wire does not carry.
    """
    if isinstance(value, torch.Tensor):
        # as the kernel's wire rebuilds it: a view, its strides kept, of storage of its own
        # (a view of a leaf says so in the errors torch raises, as in the kernel)
        tensor = value.detach().resolve_conj().resolve_neg()
        span = _span(list(tensor.shape), list(tensor.stride()))
        flat = tensor.as_strided((span,), (1,), tensor.storage_offset()).clone()
        return flat.as_strided(tensor.shape, tensor.stride())
    if isinstance(value, _PLAIN):
        return value
    if depth > 64:
        raise TypeError("nested too deeply for the wire")
    if type(value) in (list, tuple):
        items = [_wire(item, depth + 1) for item in value]
        return items if type(value) is list else tuple(items)
    if type(value) is dict:
        return {_wire(key, depth + 1): _wire(item, depth + 1) for key, item in value.items()}
    raise TypeError(f"the wire does not carry {type(value).__qualname__}")
