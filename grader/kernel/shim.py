"""The runtime shim: the only grader code that runs inside the candidate's kernel.

Its source is sent to the kernel as text, after guard.py's and wire.py's (it is never
imported there from the grader package, which the kernel may not touch). `serve` runs on
the kernel's main thread for as long as the hidden suite calls: it reads request frames
from the call channel's pipe, calls candidate code, and writes answer frames of plain data
and tensors (`grader.kernel.wire`; nothing is pickled). It decides nothing: every verdict
is computed in the grader's own process.

What it and the guard see of the exercise's watched built-ins goes to the grader through
the guard's record channel, never through an answer.
"""

import _thread
import contextlib
import linecache
import os
import sys
import traceback
from typing import TYPE_CHECKING

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:  # in the kernel, guard.py's source runs first and IPython is the host
    from IPython import get_ipython

    from grader.kernel.guard import install_guard
    from grader.kernel.measure import measure_call
    from grader.kernel.wire import WIRE_HEADER, pack, unpack

_objects: dict[int, object] = {}
_cut: dict[str, int] = {}
_MAX_TEXT = 400
# the grader's bounds on an answer: the tensors it holds, its structure
_limits = {"tensor_bytes": 64 * 1024**2, "structure_bytes": 4 * 1024**2}
# where the suite's calls run: tensors arriving are moved there, modules the suite builds
# too; tensors going back are moved to the CPU (`config["device"]`)
_device = {"name": "cpu"}


def install(fd, config, cell_output, total_output):
    """Install the guard (see guard.py: its source runs in this module first), the watch of
    the exercise's torch functions and aten ops (`config["watch"]`), the output caps, and
    `serve`; then run the exercise's own kernel setup (trusted code, before any cell)."""
    state, record, protected = install_guard(fd, config)
    _limits["tensor_bytes"] = config.get("max_tensor_bytes", _limits["tensor_bytes"])
    _limits["structure_bytes"] = config.get("max_structure_bytes", _limits["structure_bytes"])
    _device["name"] = str(config.get("device") or "cpu")
    _cap_output(cell_output, total_output)
    _cap_displays(total_output)
    restore_streams = _keep_streams()
    _disable_exit()
    watch = config.get("watch") or {}
    modes = _modes(
        record,
        frozenset(watch.get("functions", ())),
        tuple(watch.get("ops", ())),
        state["is_notebook"],
    )

    def watch_thread(trace, _state=state, _settrace=sys.settrace, _ident=_thread.get_ident):
        """The engine's allow-list on this thread (see guard.py's `_public_api_only`)."""
        _state["own_trace"] = _ident()
        try:
            _settrace(trace)
        finally:
            _state["own_trace"] = None

    class Watching:
        """The allow-list's trace function on this thread for the length of the
        candidate's own call (not the shim's decoding and encoding around it)."""

        def __enter__(self, _watch=watch_thread, _state=state):
            _watch(_state["trace"] if _state["active"] else None)

        def __exit__(self, *exc, _watch=watch_thread):
            _watch(None)

    modes = (*modes, Watching)
    state["modes"] = modes  # the guard enters the function mode on every thread from now on

    if watch.get("setup"):
        exec(compile(watch["setup"], "<grader-exercise-setup>", "exec"), {})
    requests_fd, answers_fd = config["channel"]

    def serve(
        ns,
        token,
        _state=state,
        _modes=modes,
        _respond=respond,
        _answer=_answer,
        _receive=_receive,
        _header=WIRE_HEADER,
        _write=_write_all,
        _requests=requests_fd,
        _answers=answers_fd,
        _restore=restore_streams,
        _threads=torch.get_num_threads,
        _set_threads=torch.set_num_threads,
    ):
        """Serve the grader's requests on this (the main) thread until the grader ends the
        loop, or an interrupt does. First throw away what an interrupted loop left unread,
        then write `token`: the grader reads fresh answers from there on. The calls run
        with one torch thread (the suite's inputs are small: waking a thread pool for each
        op costs more than the op; the cells keep torch's default). What candidate code
        prints meanwhile is capped as a cell's output and flushed by the kernel's own I/O
        thread; no one reads it. A profile request is no hidden test: the guard's
        during-test watch is off while it runs."""
        _receive(_requests, drain=True)
        _write(_answers, token)
        threads = _threads()
        _set_threads(1)
        try:
            while True:
                frame = _receive(_requests)
                if frame is None:  # the grader is gone
                    return
                sequence, request = frame
                if request.get("op") == "end":
                    return
                _restore()
                _state["active"] = request.get("op") != "profile"
                try:
                    response = _respond(request, ns, _modes)
                finally:
                    _state["active"] = False
                    _restore()
                if _state["redirected"]:  # the guard found its channel swapped meanwhile
                    response["tampered"] = "record"
                data = _answer(response)
                _write(_answers, _header.pack(sequence, len(data)) + data)
        finally:
            _set_threads(threads)

    protected.extend((serve, respond, watch_thread))
    globals()["serve"] = serve


def _disable_exit():
    """exit() and quit() would end the kernel after their cell, so every restart that
    replays the cell would end it again: make them fail instead."""

    def refuse(*args, **kwargs):
        raise RuntimeError("exit() and quit() are disabled while the notebook is graded")

    with contextlib.suppress(Exception):
        get_ipython().ask_exit = refuse


def _keep_streams():
    """A notebook that replaces sys.stdout or sys.stderr (with None, say) would leave the
    kernel unable to finish any later request: put the kernel's own streams back after
    every cell and around every call. Returns the function that does it."""
    streams = (sys.stdout, sys.stderr)

    def restore(*args, _streams=streams, _sys=sys):
        if _sys.stdout is not _streams[0] or _sys.stderr is not _streams[1]:
            _sys.stdout, _sys.stderr = _streams

    with contextlib.suppress(Exception):
        events = get_ipython().events
        events.register("pre_run_cell", restore)
        events.register("post_run_cell", restore)
    return restore


def _cap_displays(budget):
    """Replace displays and execute results past `budget` characters per cell by a short
    note before they are sent (a 300 MB HTML display never crosses the wire). The grader
    also refuses any message over its own bound."""
    used: dict[str, int] = {}

    def cap(msg, _used=used):
        content = msg.get("content") or {}
        data = content.get("data") or {}
        size = sum(len(v) if isinstance(v, (str, bytes)) else len(repr(v)) for v in data.values())
        key = str((msg.get("parent_header") or {}).get("msg_id", ""))
        if _used.get(key, 0) + size > budget:
            _cut[key] = _cut.get(key, 0) + size
            content["data"] = {
                "text/plain": f"[a display of {size:,} characters cut by the grader]"
            }
            content["metadata"] = {}
        else:
            _used[key] = _used.get(key, 0) + size
        return msg

    with contextlib.suppress(Exception):
        shell = get_ipython()
        shell.display_pub.register_hook(cap)
        shell.displayhook.register_hook(cap)


def _cap_output(cell_budget, total_budget):
    """Drop printed text past the budgets before it is sent, so a flood never crosses the
    wire. Hooks the kernel's stream class where it flushes (IPython re-patches `write` on
    every cell). The grader bounds what it keeps as well; this saves the transfer."""
    used: dict[str, int] = {}
    state = {"total": 0}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        base = type(stream)
        if not hasattr(base, "_flush_buffers"):
            continue

        class Capped(base):  # type: ignore[valid-type,misc]  # the kernel's own stream class
            def _flush_buffers(self, _base=base):
                for parent, data in _base._flush_buffers(self):
                    key = str(parent.get("msg_id") or parent.get("header", {}).get("msg_id", ""))
                    room = max(
                        0, min(cell_budget - used.get(key, 0), total_budget - state["total"])
                    )
                    if len(data) > room:
                        _cut[key] = _cut.get(key, 0) + len(data) - room
                        was_full = used.get(key, 0) >= cell_budget or state["total"] >= total_budget
                        data = data[:room] + ("" if was_full else "\n[output cut by the grader]\n")
                    used[key] = used.get(key, 0) + len(data)
                    state["total"] += len(data)
                    if data:
                        yield parent, data

        stream.__class__ = Capped


# Private names torch documents as API: the foreach ops (vectorised elementwise ops over
# lists of tensors, what torch.optim runs on) and the traceable assert.
_DOCUMENTED_PRIVATE = ("_foreach_", "_assert")


def _modes(record, watch_functions, watch_ops, is_notebook):
    """A TorchFunctionMode and a TorchDispatchMode that record watched calls made on the
    thread that runs a hidden test (they name the low-level ops the guard does not watch).
    The function mode also records, for every exercise, a torch function with a private
    name (`torch._softmax`, `torch._C._nn`'s, a tensor's `_` methods) that the notebook's
    own code called (see guard.py's `_public_api_only`)."""

    class SeeFunctions(TorchFunctionMode):
        def __torch_function__(
            self,
            func,
            types,
            args=(),
            kwargs=None,
            _record=record,
            _getframe=sys._getframe,
            _notebook=is_notebook,
        ):
            name = getattr(func, "__name__", "") or ""
            if name in watch_functions:
                _record("builtin", name)
            elif (
                name[:1] == "_"
                and name[:2] != "__"
                and not name.startswith(_DOCUMENTED_PRIVATE)
                and _notebook(_getframe(1))
            ):
                owner = getattr(func, "__module__", None) or _type_name(
                    getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
                )
                _record("builtin", f"torch's private function: {owner}.{name}")
            return func(*args, **(kwargs or {}))

    class SeeOps(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):
            return False  # otherwise the first use imports torch._dynamo: two seconds per grading

        def __torch_dispatch__(
            self,
            func,
            types,
            args=(),
            kwargs=None,
            _record=record,
            _known={},  # noqa: B006
        ):
            watched = _known.get(func)
            if watched is None:  # first sight of this op: is it watched? (once per op)
                name = str(func)
                hit = any(op in name for op in watch_ops)
                watched = _known[func] = name.rsplit(".", 1)[0] if hit else ""
            if watched:
                _record("builtin", watched)
            return func(*args, **(kwargs or {}))

    return SeeFunctions, SeeOps


class _Undefined(NameError):
    """A name the suite needs is not defined by the notebook."""


def _text(value):
    try:
        text = str(value)
    except BaseException:
        text = "<unprintable>"
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."


def _type_name(value):
    return _kind_name(type(value))


def _kind_name(kind):
    own = kind.__module__ == "builtins" or kind.__module__ == __name__  # the shim's own
    return kind.__qualname__ if own else f"{kind.__module__}.{kind.__qualname__}"


def _decode(value, ns, device=None):
    """A request's value with references resolved and tensors moved to `device` (None:
    left where the wire put them, on the CPU)."""
    if isinstance(value, torch.Tensor):
        return value if device is None else value.to(device)
    if isinstance(value, dict):
        if "__ref__" in value:
            return _objects[value["__ref__"]]
        if "__global__" in value:
            name = value["__global__"]
            if name not in ns:
                raise _Undefined(name)
            return ns[name]
        return {key: _decode(item, ns, device) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item, ns, device) for item in value]
    if isinstance(value, tuple):
        return tuple(_decode(item, ns, device) for item in value)
    return value


def _encode(value, depth=0):
    if isinstance(value, torch.Tensor):
        size = value.numel() * value.element_size()
        if size > _limits["tensor_bytes"]:  # before a stride-0 view is materialised
            raise ValueError(
                f"a tensor of {size:,} bytes (shape {tuple(value.shape)}) is too large"
            )
        tensor = value.detach().as_subclass(torch.Tensor)
        if tensor.layout != torch.strided:
            tensor = tensor.to_dense()
        return tensor.to("cpu").clone()
    if value is None or type(value) in (bool, int, float, str, bytes):
        return value
    if isinstance(value, bool):
        return bool(value)
    if depth < 4 and isinstance(value, (tuple, list)):
        items = [_encode(item, depth + 1) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    if depth < 4 and isinstance(value, dict) and all(_plain_key(k) for k in value):
        return {key: _encode(item, depth + 1) for key, item in value.items()}
    name = _type_name(value)
    if name.startswith("numpy."):
        return {"__foreign__": name, "repr": _text(value)}
    ref = len(_objects) + 1
    _objects[ref] = value
    return {"__ref__": ref, "type": name}


def _plain_key(key, depth=0):
    """A dict key that crosses as itself: a string, int, bytes, or a tuple of those."""
    if type(key) in (str, int, bytes):
        return True
    return type(key) is tuple and depth < 2 and all(_plain_key(k, depth + 1) for k in key)


def _where(error):
    """Qualified name and source line of the innermost frame outside torch and this shim."""
    frames = traceback.extract_tb(error.__traceback__)
    tb = error.__traceback__
    codes = []
    while tb is not None:
        codes.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    for summary, code in zip(reversed(frames), reversed(codes), strict=False):
        path = summary.filename or ""
        if "site-packages" in path or path.startswith("<grader"):
            continue
        line = (summary.line or linecache.getline(path, summary.lineno or 0)).strip()
        return getattr(code, "co_qualname", code.co_name), line
    return None, None


def _raised_in_notebook(error):
    """Whether the innermost frame of the error's traceback is the notebook's own code."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    path = tb.tb_frame.f_code.co_filename or ""
    library = any(part in path for part in ("site-packages", "dist-packages"))
    return not library and not path.startswith(("<grader", "<frozen", sys.prefix, sys.base_prefix))


def _describe(error):
    if isinstance(error, _Undefined):
        return {"type": "NameError", "message": str(error), "undefined": error.args[0]}
    where, line = _where(error)
    return {
        "type": _type_name(error),
        "message": _text(error),
        # a stub: exactly NotImplementedError (its subclasses, such as IPython's
        # StdinNotImplementedError from input(), are real errors), raised by the notebook's
        # own code (not by torch, which raises it for ops it lacks)
        "not_implemented": type(error) is NotImplementedError and _raised_in_notebook(error),
        "memory": isinstance(error, MemoryError) or "can't allocate memory" in _text(error),
        "where": where,
        "line": line,
    }


def _modules(target):
    """(name, type, the types it derives from) of every submodule."""
    return [
        [name, _type_name(module), [_kind_name(k) for k in type(module).__mro__]]
        for name, module in target.named_modules()
    ]


def _call(request, ns, modes, _device=_device):
    if request["op"] == "output_cut":
        return dict(_cut)
    if request["op"] == "hold":  # a value of the grader's, kept in the kernel as an object
        value = _decode(request["value"], ns, _device["name"])
        ref = len(_objects) + 1
        _objects[ref] = value
        return {"__ref__": ref, "type": _type_name(value)}
    target = _decode(request["target"], ns)
    if request["op"] == "modules":
        return _modules(target)
    if request["op"] == "attribute":  # a property runs candidate code: watched like a call
        with modes[0](), modes[1](), modes[2]():
            return getattr(target, str(request["name"]))
    if request["op"] == "set":
        value = _decode(request["value"], ns, _device["name"])
        with modes[0](), modes[1](), modes[2]():
            setattr(target, str(request["name"]), value)
        return None
    if request.get("method"):
        target = getattr(target, request["method"])
    # a constructor's tensors stay on the CPU (seeded weights are the CPU's); the module it
    # builds moves to the device afterwards
    device = None if request.get("construct") else _device["name"]
    args = _decode(request.get("args", []), ns, device)
    kwargs = _decode(request.get("kwargs", {}), ns, device)
    if request.get("seed") is not None:
        if _device["name"] == "cpu":
            # the CPU's generator alone: torch.manual_seed also queues a seeding for each
            # accelerator torch has not started, with a formatted stack (milliseconds,
            # and memory, per call); nothing on the CPU draws from those
            torch.default_generator.manual_seed(request["seed"])
        else:
            torch.manual_seed(request["seed"])
    if request["op"] == "grad":
        return _grad(target, args, kwargs, request, ns, modes)
    if request["op"] == "profile":
        return _profile(target, args, kwargs, request)
    with modes[0](), modes[1](), modes[2]():
        value = target(*args, **kwargs)
    if request.get("construct") and isinstance(value, torch.nn.Module):
        value.to(_device["name"])
    return value


def _profile(target, args, kwargs, request, _measure=measure_call, _device=_device):
    """Time `target(*args, **kwargs)` and measure its peak memory (see measure.py), without
    the watch and without autograd: only numbers go back, never the output."""
    return _measure(
        lambda: target(*args, **kwargs),
        repeat=max(1, min(int(request.get("repeat", 5)), 1000)),
        warmup=max(0, min(int(request.get("warmup", 1)), 10)),
        budget=float(request.get("budget", 1.0)),
        device=_device["name"],
    )


def _grad(target, args, kwargs, request, ns, modes):
    """Backpropagate sum(output * cotangent); return the gradients of inputs and parameters."""
    args = list(args)
    for index in request["wrt"]:
        args[index] = args[index].detach().clone().requires_grad_(True)
    owner = _decode(request["params_of"], ns) if request.get("params_of") else None
    if owner is not None:
        owner.zero_grad(set_to_none=True)
    with modes[0](), modes[1](), modes[2]():
        output = target(*args, **kwargs)
        picked = output
        for index in request.get("output_path", []):
            picked = picked[index]
        if not isinstance(picked, torch.Tensor):
            raise TypeError(f"output to differentiate is {_type_name(picked)}, not a tensor")
        if not picked.requires_grad:
            raise RuntimeError("output does not require grad: it is not connected to the graph")
        cotangent = request["cotangent"].to(device=picked.device, dtype=picked.dtype)
        (picked * cotangent).sum().backward()
    params = {}
    if owner is not None:
        params = {name: p.grad for name, p in owner.named_parameters()}
    return {"inputs": [args[i].grad for i in request["wrt"]], "params": params}


def respond(request, ns, modes, _call=_call, _encode=_encode, _describe=_describe):
    """The answer to one request, run against the notebook's namespace `ns`: the value
    (encoded for the wire) or what was raised; for a batch, the answers to its requests in
    order, up to the first that raised. Only KeyboardInterrupt (the grader's interrupt)
    escapes. (Its helpers are bound when the shim loads: rebinding the module's names
    later changes nothing.)"""
    if request.get("op") == "batch":
        answers = []
        for item in request.get("requests", []):
            answers.append(respond(item, ns, modes, _call, _encode, _describe))
            if "raised" in answers[-1]:
                break
        return {"answers": answers}
    try:
        value = _call(request, ns, modes)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit from candidate code is an answer too
        return {"raised": _describe(error)}
    try:
        return {"value": _encode(value)}
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the value itself cannot be sent
        return {"raised": {**_describe(error), "unsendable": True}}


def _receive(fd, drain=False, _read=os.read, _header=WIRE_HEADER, _unpack=unpack):
    """The next request frame on `fd` as (sequence, request), or None at the end of the
    pipe. With `drain`, instead read and drop whatever is there now, without waiting."""
    if drain:
        os.set_blocking(fd, False)
        try:
            while _read(fd, 1 << 16):
                pass
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(fd, True)
        return None
    chunks, need, header = [], _header.size, None
    while need:
        chunk = _read(fd, min(need, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        need -= len(chunk)
        if not need and header is None:
            header = _header.unpack(b"".join(chunks))
            chunks, need = [], header[1]
    assert header is not None
    limit = _limits["structure_bytes"]
    return header[0], _unpack(b"".join(chunks), limit, 1 << 40, 64)


def _answer(response, _pack=pack, _describe=_describe, _limits=_limits):
    """The payload of one answer; an answer the wire cannot carry (or that fails to pack
    at all) becomes what was raised."""
    try:
        return _pack(response, _limits["structure_bytes"], _limits["tensor_bytes"])
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        return _pack({"raised": {**_describe(error), "unsendable": True}})


def _write_all(fd, data, _write=os.write):
    view = memoryview(data)
    while view:
        view = view[_write(fd, view) :]
