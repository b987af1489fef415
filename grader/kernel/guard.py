"""The kernel-side guard: what the grader watches from inside the candidate's kernel.

Like the shim, this source is sent to the kernel as text and runs there before the first
cell. It installs observation points that candidate code cannot switch off:

- a PEP 578 audit hook (it cannot be removed from Python): imports and file access that
  reach the grader's installation or its private folder are refused and recorded, so are
  writes into the Python environment, `gc` walks, reads of the guard's own functions'
  internals and redirections of the record channel; a program a graded call starts is
  evidence, one the notebook's cells start (a shell command, `subprocess`) and a thread
  it starts are notes;
- for each aten op the exercise watches (``watch["dispatch"]``, and every registered op
  matching ``watch["dispatch_pattern"]``: for attention, the public op and the private
  and composite ones behind it), a kernel at the dispatcher that records every call from
  any thread, then runs torch's own kernel (see `_watch_torch`);
- the code of each Python function the exercise watches (``watch["instrument"]``, dotted
  paths such as ``torch.nn.functional.multi_head_attention_forward``) replaced in place,
  so every reference to it, from any thread, records its calls.

Every sighting is written at once, as one JSON line, to a pipe whose other end is in the
grader: nothing candidate code does later can take it back. The guard's state lives in
default arguments, which the audit hook keeps candidate code from reading, never in
module globals. Nothing here decides a verdict; the grader reads the records.
"""

import contextlib
import json
import os
import sys
import time
import types

# A built-in seen again at the same place is sent again after this many seconds.
_BUILTIN_REPEAT = 0.05


def _make_recorder(fd, cell_prefix, workdir, state):
    """record(kind, message, depth): one JSON line to the grader, once per distinct record,
    naming the candidate's cell file and line where the record was triggered. Before each
    write it checks that `fd` is still the pipe the grader gave: one swapped in (os.dup2)
    or closed while a graded call runs, and put back before the grader looks, sets
    ``state["redirected"]``, which the shim reports with the call's answer."""

    inode = os.fstat(fd).st_ino

    def where(_getframe=sys._getframe, _prefixes=(cell_prefix, workdir)):
        frame = _getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(_prefixes):
                return name, frame.f_lineno
            frame = frame.f_back
        return "", 0

    def record(
        kind,
        message,
        _where=where,
        _write=os.write,
        _fd=fd,
        _sent={},  # noqa: B006 (private on purpose: only the recorder holds it)
        _dumps=json.dumps,
        _suppress=contextlib.suppress,
        _clock=time.monotonic,
        _fstat=os.fstat,
        _inode=inode,
        _state=state,
    ):
        try:
            same = _fstat(_fd).st_ino == _inode
        except OSError:
            same = False
        if not same:
            _state["redirected"] = True
            return
        file, line = _where()
        key = (kind, message, file, line)
        now = _clock()
        last = _sent.get(key)
        # Once per distinct record; a built-in again after a pause: the grader tells the
        # notebook's own cells from the hidden tests by when a sighting arrives, so a
        # sighting at a place seen in a cell must be sent again when a test repeats it.
        if last is not None and (kind != "builtin" or now - last < _BUILTIN_REPEAT):
            return
        _sent[key] = now
        data = _dumps({"k": kind, "m": message, "f": file, "l": line}) + "\n"
        # A child that closed its descriptors cannot write; in the kernel, the grader
        # checks from outside that the channel is still there.
        with _suppress(OSError):
            _write(_fd, data.encode())

    return record


def install_guard(fd, config):
    """Install the audit hook and the torch watch. `config` holds the paths and names the
    grader computed: hidden, environment, allowed_imports, blocked_imports, workdir, and
    the exercise's `watch` (dispatch, instrument)."""
    import torch
    from ipykernel.compiler import get_tmp_directory

    workdir = os.path.realpath(config["workdir"]) + os.sep
    state = {"active": False, "busy": False, "redirected": False}
    record = _make_recorder(fd, get_tmp_directory() + os.sep, workdir, state)
    protected: list[object] = []
    _watch_torch(torch, record, state, protected, workdir, config.get("watch") or {})
    library = tuple(os.path.realpath(p) + os.sep for p in config["environment"]) + tuple(
        p.rstrip(os.sep) + os.sep for p in config["environment"]
    )
    state["trace"], state["thread_trace"], state["is_notebook"] = _public_api_only(
        torch, record, state, protected, library
    )
    _watch_threads(record, state, protected, workdir)
    _watch_compilers(torch, record, protected, workdir)
    hook = _make_hook(record, state, protected, config, workdir)
    sys.addaudithook(hook)
    os.write(fd, (json.dumps({"k": "pid", "m": str(os.getpid())}) + "\n").encode())
    return state, record, protected


def _watch_torch(torch, record, state, protected, workdir, watch):
    """Record calls of the exercise's built-ins from any thread, at any time (the grader
    tells the hidden tests from the notebook's own cells by when a sighting arrives).

    At the dispatcher: every aten op named in ``watch["dispatch"]`` or whose name matches
    ``watch["dispatch_pattern"]`` (derived from the ops torch registered, private and
    composite ones included). A composite op gets a kernel at the CPU (and CUDA) and
    autograd keys that records, then runs the composite; any other op gets one at
    BackendSelect (below autograd, so gradients are untouched, and reached in inference
    mode too) that records, then redispatches to torch's own kernel. Calls that name a
    dispatch key (``OpOverload._op_dk``, ``torch._C._get_operation_overload``) record too.
    """
    import importlib
    import re
    import warnings

    from torch._C import DispatchKey

    names = set(watch.get("dispatch", ()))
    pattern = watch.get("dispatch_pattern")
    if pattern:
        found = re.compile(pattern)
        for full in torch._C._dispatch_get_all_op_names():
            namespace, _, name = full.partition("::")
            if namespace == "aten" and found.search(name):
                names.add(name.partition(".")[0])
    library = torch.library.Library("aten", "IMPL") if names else None
    cuda = torch.cuda.is_available()
    composite_keys = ["CPU", "AutogradCPU"] + (["CUDA", "AutogradCUDA"] if cuda else [])
    below = torch._C._dispatch_keyset_full_after(DispatchKey.BackendSelect)
    watched = {}
    for name in sorted(names):
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            qualified = name if overload == "default" else f"{name}.{overload}"
            try:
                composite = torch._C._dispatch_has_kernel_for_dispatch_key(
                    op.name(), "CompositeImplicitAutograd"
                )
            except RuntimeError:  # an overload the Python side lists, the dispatcher lacks
                continue
            if composite:
                kernel = _composite_kernel(op, record, name)
                keys, options = composite_keys, {}
            else:
                kernel = _backend_kernel(op, record, name, below)
                keys, options = ["BackendSelect"], {"with_keyset": True}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for key in keys:
                    try:
                        library.impl(qualified, kernel, key, **options)  # type: ignore[union-attr]
                    except RuntimeError:  # an op this build cannot take a kernel for
                        break
            protected.append(kernel)
            op._op_dk = _keyed(op._op_dk, record, name)
            watched[op.name()] = name
    if library is not None:
        torch.library._keep_alive.append(library)
    _watch_keyed_lookups(torch, record, watched, protected)
    if pattern:
        _watch_higher_order_ops(record, protected, re.compile(pattern))

    for path in watch.get("instrument", ()):
        module, _, rest = path.partition(":")
        owner = importlib.import_module(module)
        *parents, name = rest.split(".")
        for part in parents:
            owner = getattr(owner, part)
        sighting = _always(record, "builtin", rest)
        protected.append(_instrument(getattr(owner, name), sighting))
    # Registering kernels is how code would replace the dispatcher-level watch.
    sighting = _from_notebook(record, workdir, "machinery", "torch.library: registers kernels")
    protected.append(_instrument(torch.library.Library.__init__, sighting))


def _composite_kernel(op, record, name):
    """Records, then runs the op's composite (its autograd comes from what it calls)."""
    from torch._C import DispatchKey

    def kernel(*args, _dk=op._op_dk, _record=record, _name=name, **kwargs):
        _record("builtin", _name)
        return _dk(DispatchKey.CompositeImplicitAutograd, *args, **kwargs)

    return kernel


def _backend_kernel(op, record, name, below):
    """At BackendSelect: records, then hands the call on to torch's own kernel."""

    def kernel(keyset, *args, _op=op, _record=record, _name=name, _below=below, **kwargs):
        _record("builtin", _name)
        return _op.redispatch(keyset & _below, *args, **kwargs)

    return kernel


def _watch_higher_order_ops(record, protected, pattern):
    """torch's higher-order operators whose name matches (`flex_attention`): not aten ops,
    so the dispatcher's kernels never see them. Every Python function of the operator's
    own module is instrumented in place (its eager kernels such as the dense reference,
    their helpers; closures keep their code, and the eager path runs through the
    kernels), so a call from any thread, by any reference, is seen."""
    import sys as _sys

    from torch._ops import _higher_order_ops

    done = set()
    for name, hop in list(_higher_order_ops.items()):
        module = type(hop).__module__
        if not pattern.search(name) or module in done:
            continue
        done.add(module)
        owner = _sys.modules.get(module)
        functions = [vars(type(hop)).get("__call__"), *getattr(hop, "py_kernels", {}).values()]
        functions += list(vars(owner).values()) if owner is not None else []
        seen = set()
        for function in functions:
            if (
                isinstance(function, types.FunctionType)
                and function.__module__ == module
                and not function.__code__.co_freevars  # (a closure keeps its code)
                and id(function) not in seen
            ):
                seen.add(id(function))
                protected.append(_instrument(function, _always(record, "builtin", name)))


def _keyed(call, record, name):
    """A call of an op at a named dispatch key (which skips the dispatcher's watch),
    recorded first."""

    def keyed(key, *args, _call=call, _record=record, _name=name, **kwargs):
        _record("builtin", _name)
        return _call(key, *args, **kwargs)

    return keyed


def _watch_keyed_lookups(torch, record, watched, protected):
    """`torch._C._get_operation_overload` hands out an op's callables afresh: the one that
    takes a dispatch key is wrapped for the watched ops."""
    original = torch._C._get_operation_overload

    def get_operation_overload(name, overload, *rest, _original=original, _watched=watched):
        found = _original(name, overload, *rest)
        short = _watched.get(name)
        if short is None or not isinstance(found, tuple) or len(found) != 3:
            return found
        op, op_dk, tags = found
        return op, _keyed(op_dk, record, short), tags

    torch._C._get_operation_overload = get_operation_overload
    protected.append(get_operation_overload)


def _always(record, kind, message):
    """A sighting recorded whenever the watched function runs, from any thread."""

    def sighting(_record=record, _kind=kind, _message=message):
        _record(_kind, _message)

    return sighting


def _from_notebook(record, workdir, kind, message):
    """A sighting recorded when the notebook's own code is the caller, at any time."""

    def sighting(_getframe=sys._getframe, _record=record, _workdir=workdir):
        frame = _getframe(3)  # past this, the instrumented call and the replaced code
        name = frame.f_code.co_filename if frame is not None else ""
        if "/ipykernel_" in name or name.startswith(_workdir):
            _record(kind, message)

    return sighting


def _instrument(function, sighting):
    """Replace `function`'s code in place, so that every existing reference to it calls
    `sighting()` first, then a private copy of the original."""
    original = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__,
        function.__closure__,
    )  # fmt: skip
    original.__kwdefaults__ = function.__kwdefaults__

    def call(args, kwargs, _original=original, _sighting=sighting):
        _sighting()
        return _original(*args, **kwargs)

    def template(*args, **kwargs):
        return "CALL"(args, kwargs)  # type: ignore[operator]  # the constant is replaced below

    code = template.__code__
    consts = tuple(call if c == "CALL" else c for c in code.co_consts)
    if sys.version_info >= (3, 11):
        code = code.replace(co_qualname=function.__qualname__)
    function.__code__ = code.replace(co_consts=consts, co_name=function.__name__)
    function.__defaults__ = None
    function.__kwdefaults__ = None
    return function


# Below torch, what the graded code may not enter whatever the exercise (besides the
# private modules): torch's ONNX exporter and its ops, and its operator registration.
_CLOSED_MODULES = ("torch.onnx", "torch.library")
# Private modules torch's C++ calls back into while it runs an ordinary op under a
# dispatch mode (the shim's, during a test): the Python frame it enters has the
# notebook's frame as its caller. They look up rules and compute nothing of an exercise.
_CALLBACKS = ("torch._library.simple_registry", "torch.utils._python_dispatch")


def _public_api_only(torch, record, state, protected, library):
    """The engine's allow-list, for every exercise: the graded code reaches torch through
    its public API only. Returns a trace function (`sys.settrace`) that the shim sets on
    the thread of each graded call for the length of the call, the same for the threads
    the guard starts (it carries it for their whole life: it acts only while a hidden test
    runs), and `is_notebook(frame)`. The trace function records as a
    built-in every Python call made from the notebook's own code into:

    - torch's code that the public API does not hand out: a module with a private part
      (`torch._refs`, `torch._decomp`, `torch._prims`, `torch._ops`: so `torch.ops` and an
      op's `redispatch` too), or `_CLOSED_MODULES`, unless the function is reached from a
      public name (`torch.Tensor`'s methods live in `torch._tensor`);
    - torch's source run again under another name (a second module made from
      `torch/optim/adam.py`): its code objects are not the ones torch's modules hold.

    (A C function of torch's with a private name, `torch._softmax`, is the shim's
    function mode's to see, with `is_notebook`.) Only the frame that enters torch from
    the notebook's code is judged: what public code calls below is torch's business. The
    notebook's code is any code but torch's and the library's (`library`: the grading
    environment's folders, the standard library among them): cells, modules the notebook
    wrote, code it compiled. Each frame is told by its globals, classified once from the
    first of its code seen (so the fast path reads no code object: reading `f_code` is an
    audit event). A C function called by another C function (`map(torch._C.f, ...)`), and
    torch's C functions that take no part in torch's function dispatch, raise no event:
    the dispatcher's watch and the source scan are what see them."""
    import types as _types

    torch_dirs = tuple(
        {
            os.path.dirname(torch.__file__) + os.sep,
            os.path.dirname(os.path.realpath(torch.__file__)) + os.sep,
        }
    )
    not_notebook = (*torch_dirs, *library, "<frozen", "<grader-")
    kinds: dict = {}  # id(globals) -> (the globals, "torch", "again", "library" or "notebook")
    verdicts: dict = {}  # (id(globals), first line) -> (the globals, "" or what it is)
    public: dict = {}  # filled on first use: the code objects the public API hands out

    def private(name):
        return any(p.startswith("_") and not p.startswith("__") for p in name.split(".")) or (
            name.startswith(_CLOSED_MODULES)
        )

    def add_code(code, into):
        if id(code) in into:
            return
        into[id(code)] = code
        for const in code.co_consts:
            if isinstance(const, _types.CodeType):
                add_code(const, into)

    def add_function(value, into, depth=0):
        while isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            for part in (value.fget, value.fset, value.fdel):
                add_function(part, into, depth)
            return
        if isinstance(value, _types.FunctionType):
            add_code(value.__code__, into)
            for cell in value.__closure__ or ():
                try:
                    inner = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(inner, _types.FunctionType) and depth < 3:
                    add_function(inner, into, depth + 1)
            wrapped = value.__dict__.get("__wrapped__") if depth < 3 else None
            if wrapped is not None and wrapped is not value:
                add_function(wrapped, into, depth + 1)

    def add_namespace(namespace, into, classes):
        for value in list(namespace.values()):
            if isinstance(value, type) and str(getattr(value, "__module__", "")).startswith(
                "torch"
            ):
                if id(value) in classes:
                    continue
                classes.add(id(value))
                for klass in value.__mro__:
                    if str(getattr(klass, "__module__", "")).startswith("torch"):
                        add_namespace(dict(vars(klass)), into, classes)
            else:
                add_function(value, into)

    def exported(module, name, value):
        """Whether `module.name` hands `value` out as torch's public API: a public name,
        and a function (`torch.jit.is_scripting` from `torch._jit_internal`), or a class
        whose home is public, or that the module lists in `__all__` or re-exports from its
        own package (`torch.Tensor` from `torch._tensor`). A private class another module
        imported for its own use (`torch.fx` importing `OpOverload` from `torch._ops`) is
        not handed out: its methods would be."""
        if name.startswith("_") and not name.startswith("__"):
            return False
        if not isinstance(value, type):
            return True
        home = getattr(value, "__module__", None)
        if not isinstance(home, str):
            return False
        listed = getattr(module, "__all__", None)
        return (
            not private(home)
            or (isinstance(listed, (list, tuple)) and name in listed)
            or home.startswith(module.__name__ + ".")
        )

    def public_api(_state=state):
        """(Once, at the first call into torch's private code from the notebook during a
        test: torch's modules imported by then; the audit hook does not watch the walk.)"""
        if not public:
            busy, _state["busy"] = _state["busy"], True
            try:
                classes: set = set()
                for name, module in list(sys.modules.items()):
                    torch_module = name == "torch" or name.startswith("torch.")
                    if module is None or not torch_module or private(name):
                        continue
                    handed = {
                        key: value
                        for key, value in list(vars(module).items())
                        if exported(module, key, value)
                    }
                    add_namespace(handed, public, classes)
            finally:
                _state["busy"] = busy
        return public

    modules: dict = {}

    def known(module_name, _state=state):
        """Every code object of torch's module `module_name` as loaded (its functions,
        classes and what they nest)."""
        if module_name not in modules:
            module = sys.modules.get(module_name)
            found: dict = {}
            if module is not None:
                busy, _state["busy"] = _state["busy"], True
                try:
                    add_namespace(dict(vars(module)), found, set())
                finally:
                    _state["busy"] = busy
            modules[module_name] = found
        return modules[module_name]

    def judge_code(code):
        path = code.co_filename
        relative = path[len(next(d for d in torch_dirs if path.startswith(d))) :]
        name = "torch." + relative.removesuffix(".py").replace(os.sep, ".")
        name = name.removesuffix(".__init__")
        where = f"{name}.{code.co_qualname}"
        if id(code) not in known(name) and id(code) not in public_api():
            return f"torch's source run again under another name: {where}"
        if private(name) and not name.startswith(_CALLBACKS) and id(code) not in public_api():
            return f"torch's private code: {where}"
        return ""

    skip: set = set()  # ids of the globals whose code is not the notebook's

    def classify(frame, _kinds=kinds, _modules=sys.modules, _skip=skip):
        """The kind of the code running on `frame`'s globals, from this frame's code."""
        found = frame.f_globals
        path = frame.f_code.co_filename
        if path.startswith(torch_dirs):
            name = found.get("__name__")
            module = _modules.get(name) if isinstance(name, str) else None
            kind = "torch" if getattr(module, "__dict__", None) is found else "again"
        elif path.startswith(not_notebook):
            kind = "library"
        else:
            kind = "notebook"
        _kinds[id(found)] = (found, kind)
        if kind != "notebook":
            _skip.add(id(found))
        return kind

    def is_notebook(frame, _kinds=kinds, _classify=classify):
        entry = _kinds.get(id(frame.f_globals))
        return (entry[1] if entry is not None else _classify(frame)) == "notebook"

    def trace(
        frame,
        event,
        arg,
        _skip=skip,
        _kinds=kinds,
        _classify=classify,
        _verdicts=verdicts,
        _record=record,
    ):
        # (every Python call of the thread comes here: the common case is one set lookup;
        # a function is told by its globals and first line, so no code object is read,
        # which is an audit event, once it has been judged)
        caller = frame.f_back
        if caller is None or id(caller.f_globals) in _skip:
            return None
        try:
            entry = _kinds.get(id(caller.f_globals))
            if entry is None and _classify(caller) != "notebook":
                return None
            found = frame.f_globals
            entry = _kinds.get(id(found))
            kind = entry[1] if entry is not None else _classify(frame)
            if kind == "torch" or kind == "again":
                key = (id(found), frame.f_lineno)
                verdict = _verdicts.get(key)
                if verdict is None:
                    verdict = _verdicts[key] = (found, judge_code(frame.f_code))
                if verdict[1]:
                    _record("builtin", verdict[1])
        except Exception:  # noqa: BLE001, S110 (a trace function that raises is unset)
            pass
        return None

    def trace_when_active(frame, event, arg, _state=state, _trace=trace):
        """For threads, which carry it for their whole life: only during a hidden test."""
        return _trace(frame, event, arg) if _state["active"] else None

    protected.extend((trace, trace_when_active, is_notebook))
    return trace, trace_when_active, is_notebook


def _watch_compilers(torch, record, protected, workdir):
    """The kernels run with TorchDynamo and TorchScript off (`TORCHDYNAMO_DISABLE`,
    `PYTORCH_JIT=0`): `torch.compile` and `torch.jit.script` hand back the notebook's own
    code, which runs eagerly, watched like the rest. A note on the card says so."""
    message = "torch.compile or torch.jit ran the code eagerly (off while the notebook is graded)"
    for owner, name in ((torch, "compile"), (torch.jit, "script"), (torch.jit, "trace")):
        function = getattr(owner, name, None)
        if isinstance(function, types.FunctionType):
            sighting = _from_notebook(record, workdir, "note", message)
            protected.append(_instrument(function, sighting))


def _watch_threads(record, state, protected, workdir):
    """Note threads the notebook's code starts while a graded call runs. A thread is no
    evidence (the dispatcher-level watch sees a built-in on any thread); the note says how a
    built-in seen got there. Threads the kernel starts for itself (output, heartbeat,
    history) are never the candidate's: the first caller outside the standard library must
    be the notebook's code."""
    import _thread
    import threading

    started_by_notebook = _first_caller_is_notebook(workdir)

    def watched(function, args, kwargs, _state=state, _settrace=sys.settrace):
        """The new thread's first code: the engine's allow-list (a trace function) and
        the exercise's torch function mode, for as long as it runs (they record only while a hidden
        test runs: `state["active"]`)."""
        _state["own_trace"] = _thread.get_ident()
        try:
            _settrace(_state["thread_trace"])
        finally:
            _state["own_trace"] = None
        # the function mode only: a dispatch mode would stop torch's higher-order operators
        # (flex_attention) on this thread; the dispatcher's watch sees every thread's ops
        modes = _state.get("modes") or ()
        with contextlib.ExitStack() as stack:
            for mode in modes[:1]:
                stack.enter_context(mode())
            return function(*args, **kwargs)

    def start(
        function,
        args=(),
        kwargs=None,
        *rest,
        _start=_thread.start_new_thread,
        _state=state,
        _record=record,
        _notebook=started_by_notebook,
        _watched=watched,
    ):
        if _state["active"] and _notebook(2):
            _record("note", "started a thread during a hidden test")
        return _start(_watched, (function, args, kwargs or {}), *rest)

    _thread.start_new_thread = start
    setattr(threading, "_start_new_thread", start)  # noqa: B010 (a private name of threading)
    protected.extend((start, watched))
    # threading.settrace: the trace function every new thread sets in place of the
    # allow-list's (the thread's own call of sys.settrace is threading's, not the notebook's)
    for name in ("settrace", "setprofile"):
        message = f"threading.{name}: replaces the grader's watch on new threads"
        sighting = _from_notebook(record, workdir, "machinery", message)
        protected.append(_instrument(getattr(threading, name), sighting))


def _first_caller_is_notebook(workdir):
    """is_notebook(depth): whether the first frame from `depth` up (0 is is_notebook's own)
    that is not the standard library's (nor importlib's frozen code) is the notebook's code: a cell, or a module
    the notebook wrote into its folder. IPython, ipykernel, torch and numpy doing their own
    work (a reload, an output thread, a lazy import of ctypes) are not the notebook."""
    import sysconfig

    stdlib = tuple(
        os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")
    )

    def is_notebook(
        depth,
        _getframe=sys._getframe,
        _stdlib=stdlib,
        _workdir=workdir,
        _packages=("site-packages", "dist-packages"),
    ):
        frame = _getframe(depth)
        while frame is not None:
            name = frame.f_code.co_filename
            library = name.startswith("<frozen") or (
                name.startswith(_stdlib) and not any(p in name for p in _packages)
            )
            if not library:
                return "/ipykernel_" in name or name.startswith(_workdir)
            frame = frame.f_back
        return False

    return is_notebook


# Installing a package runs no code in the kernel (it imports only the declared
# environment, and pip writes to the scratch space): not a finding.
_INSTALL = __import__("re").compile(
    r"\s*(\S*/)?(sh -c )?(pip3?|python3? -m pip|conda|mamba|micromamba|uv pip)\s+install\b"
    r"[^;&|`$<>()\n]*$"
)


def _command(args):
    """(the command line of a process-starting audit event, whether it runs through a
    shell): the argument list when the event has one, else its first string."""
    command = next((a for a in args if isinstance(a, (list, tuple))), None)
    if command is None:
        command = [next((a for a in args if isinstance(a, (str, bytes))), "")]
    parts = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in command]
    text = " ".join(parts)
    if " -c " in text and parts and parts[0].endswith("sh"):
        return text.split(" -c ", 1)[1], True
    return text, False


# Reading frames is how code reaches the grader's locals up the stack.
_FRAME_HELPERS = ("/inspect.py",)
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_code"})


def _under(path, folders):
    return any(path == f or path.startswith(f + os.sep) for f in folders)


def _make_hook(record, state, protected, config, workdir):
    hidden = tuple(os.path.realpath(p) for p in config["hidden"])
    environment = tuple(os.path.realpath(p) for p in config["environment"])
    allowed = frozenset(config["allowed_imports"]) | frozenset(sys.stdlib_module_names)
    # The grader's package, and its folders' names (an `exercises` imported from a source
    # tree put on sys.path is the hidden suites).
    blocked = frozenset(config["blocked_imports"])
    folders = frozenset(os.path.basename(p) for p in hidden) - blocked
    private_proc = ("/fd", "/mem", "/maps", "/environ")
    # the last part of a relative path opened beside a descriptor of /proc/<pid> (dir_fd)
    private_names = frozenset(p.strip("/") for p in private_proc)
    # Sandboxed, /proc is read-only and private to the kernel: the operating system refuses
    # what the /proc checks refuse here, by any path or descriptor
    proc_checks = not config.get("sandboxed")
    watched = frozenset(
        {
            "import", "open", "os.listdir", "os.scandir", "os.remove", "os.rename",
            "os.mkdir", "os.symlink", "os.truncate", "shutil.rmtree", "shutil.copytree",
            "glob.glob", "os.walk", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
            "object.__getattr__", "object.__setattr__", "sys.settrace", "sys.setprofile",
            "sys._getframe",
            "sys._current_frames", "sys.addaudithook", "ctypes.dlopen", "ctypes.dlsym",
            "ctypes.cdata", "ctypes.addressof", "ctypes.string_at", "subprocess.Popen",
            "os.system", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "pty.spawn",
        }
    )  # fmt: skip
    refusals = {
        "hidden": PermissionError,
        "environment": PermissionError,
        "machinery": RuntimeError,
    }

    def refuse(kind, message, error=None, _record=record, _refusals=refusals):
        _record(kind, message)
        raise (error or _refusals[kind])(f"{message}: not allowed while the notebook is graded")

    def check_path(
        event,
        path,
        writing,
        _private_proc=private_proc,
        _private_names=private_names,
        _proc_checks=proc_checks,
        _realpath=os.path.realpath,
        _fspath=os.fspath,
        _under=_under,
    ):
        if isinstance(path, int) or path is None:
            return
        try:
            text = _fspath(path)
            if isinstance(text, bytes):
                text = text.decode(errors="replace")
            real = _realpath(text)
        except (TypeError, ValueError):
            return
        if _under(real, hidden):
            refuse("hidden", f"{event} {text} (the grader's own files)")
        if _proc_checks and (
            (real.startswith("/proc/") and any(part in real for part in _private_proc))
            or (not text.startswith("/") and os.path.basename(text) in _private_names)
        ):
            refuse("machinery", f"{event} {text} (a process's file descriptors or memory)")
        if writing and _under(real, environment):
            refuse("environment", f"{event} {text} (the grading environment is read-only)")

    def candidate_import(_getframe=sys._getframe, _workdir=workdir):
        frame = _getframe(3)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back
        if frame is None:
            return False
        name = frame.f_code.co_filename
        return name.startswith(_workdir) or "/ipykernel_" in name

    def shell_escape(
        _getframe=sys._getframe,
        _helpers=("/IPython/", "/pexpect/", "/ptyprocess/"),
        _workdir=workdir,
    ):
        """Whether IPython's !cmd is forking (the command it runs is judged when it
        starts), rather than the notebook's own code."""
        frame = _getframe(3)
        while frame is not None:
            name = frame.f_code.co_filename
            if "/ipykernel_" in name or name.startswith(_workdir):
                return False
            if any(h in name for h in _helpers):
                return True
            frame = frame.f_back
        return False

    def where_notebook(_getframe=sys._getframe, _workdir=workdir):
        """Whether the notebook's code is anywhere on the stack of the event."""
        frame = _getframe(3)
        while frame is not None:
            name = frame.f_code.co_filename
            if "/ipykernel_" in name or name.startswith(_workdir):
                return True
            frame = frame.f_back
        return False

    def candidate_reads_frames(_getframe=sys._getframe, _workdir=workdir, _helpers=_FRAME_HELPERS):
        """Whether the code that triggered the event is the notebook's, directly or
        through the standard library's frame helpers (inspect.currentframe, stack)."""
        frame = _getframe(3)
        if frame is not None and frame.f_code.co_filename.endswith(_helpers):
            frame = frame.f_back
            while frame is not None and frame.f_code.co_filename.endswith(_helpers):
                frame = frame.f_back
        if frame is None:
            return False
        name = frame.f_code.co_filename
        return name.startswith(_workdir) or "/ipykernel_" in name

    notebook = _first_caller_is_notebook(workdir)
    _get_ident = __import__("_thread").get_ident

    def hook(event, args, _watched=watched, _state=state, _protected=protected):
        if event not in _watched or _state["busy"]:
            return
        _state["busy"] = True
        try:
            _check(event, args, _protected)
        finally:
            _state["busy"] = False

    def _check(
        event,
        args,
        protected_functions,
        _state=state,
        _record=record,
        _local=_local_module,
        _frames=_FRAME_ATTRIBUTES,
        _install=_INSTALL.match,
        _command=_command,
        notebook=notebook,
        _get_ident=_get_ident,
        _gettrace=sys.gettrace,
    ):
        if event == "import":
            name = str(args[0])
            top = name.partition(".")[0]
            if top in blocked or top in folders and not _local(top, workdir):
                refuse("hidden", f"import {name} (the grader's own package)", ImportError)
            if top not in allowed and candidate_import() and not _local(top, workdir):
                _record("environment", f"import {top}: not in the grading environment")
                raise ModuleNotFoundError(f"{top} is not available in the grading environment")
        elif event == "open":
            mode = args[1] if len(args) > 1 else "r"
            flags = args[2] if len(args) > 2 else 0
            writing = bool(isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            check_path(event, args[0], writing)
        elif event in ("os.listdir", "os.scandir", "glob.glob", "os.walk"):
            check_path(event, args[0] if args else ".", False)
        elif event in ("os.remove", "os.rename", "os.mkdir", "os.symlink", "os.truncate"):
            check_path(event, args[0] if args else None, True)
            if event in ("os.rename", "os.symlink") and len(args) > 1:
                check_path(event, args[1], True)
        elif event in ("shutil.rmtree", "shutil.copytree"):
            check_path(event, args[-1] if event == "shutil.copytree" else args[0], True)
        elif event.startswith("gc."):
            if where_notebook():  # not IPython's autoreload, say, between cells
                refuse("machinery", f"{event}() walks the interpreter's objects")
        elif event in ("object.__getattr__", "object.__setattr__"):
            if args and any(args[0] is f for f in protected_functions):
                refuse("machinery", f"{event.split('.')[1]} {args[1]} of the grader's watch")
            if len(args) > 1 and args[1] in _frames and candidate_reads_frames():
                _record("machinery", f"reads {args[1]}: interpreter frames reach the grader")
        elif event == "sys._getframe":
            if candidate_reads_frames():
                _record("machinery", "reads interpreter frames (sys._getframe, inspect)")
        elif event == "sys.settrace":
            if _state.get("own_trace") == _get_ident() or not notebook(3):
                # the guard's or the shim's own, or the kernel's (an interrupt); a thread
                # started after threading.settrace is the sighting of threading.settrace
                return
            if _gettrace() in (_state.get("trace"), _state.get("thread_trace")):
                # the allow-list's trace function is set on this thread: the notebook's
                # code replacing it (sys.settrace, a debugger) would switch it off
                refuse("machinery", "replaces the grader's trace function (sys.settrace)")
            _record("machinery", f"{event}()")
        elif event in ("sys.setprofile", "sys._current_frames", "sys.addaudithook"):
            if notebook(3):
                _record("machinery", f"{event}()")
        elif event.startswith("ctypes."):
            if notebook(3):  # not IPython or torch importing ctypes for their own use
                _record("machinery", f"{event} (ctypes reaches below Python)")
        elif _state["active"]:
            command, _ = _command(args)
            _record("machinery", f"started a program during a hidden test: {command[:200]}")
        elif event in ("os.fork", "os.forkpty"):
            if not shell_escape():  # IPython's !cmd forks, then the command is noted
                _record("note", "forked the kernel (a copy the grader does not watch)")
        else:
            command, shell = _command(args)
            shell = shell or event == "os.system"
            what = "ran a shell command" if shell else "started a program"
            if not _install(command):
                _record("note", f"{what}: {command[:200]}")

    return hook


def _local_module(top, workdir):
    """A module the notebook wrote into its own folder (its code is watched like a cell's)."""
    return os.path.exists(os.path.join(workdir, top + ".py")) or os.path.isdir(
        os.path.join(workdir, top)
    )
