"""The kernel-side guard: what the grader watches from inside the candidate's kernel.

Like the shim, this source is sent to the kernel as text and runs there before the first
cell. It installs observation points that candidate code cannot switch off:

- a PEP 578 audit hook (it cannot be removed from Python): imports and file access that
  reach the grader's installation or its private folder are refused and recorded, so are
  writes into the Python environment, `gc` walks, reads of the guard's own functions'
  internals and redirections of the record channel; threads and processes started during
  a hidden test are recorded;
- for each aten op the exercise watches (``watch["dispatch"]``, e.g.
  ``scaled_dot_product_attention``), a kernel at the dispatcher (CPU and autograd keys)
  that records every call from any thread, then runs torch's own kernel;
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
import types


def _make_recorder(fd, cell_prefix, workdir):
    """record(kind, message, depth): one JSON line to the grader, once per distinct record,
    naming the candidate's cell file and line where the record was triggered."""

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
        _sent=set(),  # noqa: B006 (private on purpose: only the recorder holds it)
        _dumps=json.dumps,
        _suppress=contextlib.suppress,
    ):
        file, line = _where()
        key = (kind, message, file, line)
        if key in _sent:
            return
        _sent.add(key)
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
    record = _make_recorder(fd, get_tmp_directory() + os.sep, workdir)
    state = {"active": False, "busy": False}
    protected: list[object] = []
    _watch_torch(torch, record, state, protected, workdir, config.get("watch") or {})
    _watch_threads(record, state, protected)
    hook = _make_hook(record, state, protected, config, workdir)
    sys.addaudithook(hook)
    os.write(fd, (json.dumps({"k": "pid", "m": str(os.getpid())}) + "\n").encode())
    return state, record, protected


def _watch_torch(torch, record, state, protected, workdir, watch):
    """Record calls of the exercise's built-ins from any thread, during hidden tests."""
    import importlib
    import warnings

    from torch._C import DispatchKey

    dispatch = watch.get("dispatch", ())
    library = torch.library.Library("aten", "IMPL") if dispatch else None
    keys = ["CPU", "AutogradCPU"] + (["CUDA", "AutogradCUDA"] if torch.cuda.is_available() else [])
    for name in dispatch:
        op = getattr(torch.ops.aten, name).default

        def kernel(
            *args,
            _op=op,
            _key=DispatchKey.CompositeImplicitAutograd,
            _state=state,
            _record=record,
            _name=name,
            **kwargs,
        ):
            if _state["active"]:
                _record("builtin", _name)
            return _op._op_dk(_key, *args, **kwargs)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key in keys:
                library.impl(name, kernel, key)  # type: ignore[union-attr]  # set when dispatch is
        protected.append(kernel)
    if library is not None:
        torch.library._keep_alive.append(library)

    for path in watch.get("instrument", ()):
        module, _, rest = path.partition(":")
        owner = importlib.import_module(module)
        *parents, name = rest.split(".")
        for part in parents:
            owner = getattr(owner, part)
        sighting = _during_tests(record, state, "builtin", rest)
        protected.append(_instrument(getattr(owner, name), sighting))
    # Registering kernels is how code would replace the dispatcher-level watch.
    sighting = _from_notebook(record, workdir, "machinery", "torch.library: registers kernels")
    protected.append(_instrument(torch.library.Library.__init__, sighting))


def _during_tests(record, state, kind, message):
    """A sighting recorded while a hidden test runs, from any thread."""

    def sighting(_state=state, _record=record, _kind=kind, _message=message):
        if _state["active"]:
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


def _watch_threads(record, state, protected):
    """Record threads started while a hidden test runs (a built-in run from another thread
    escapes per-thread observers; the guard's other watches see it, this says how)."""
    import _thread
    import threading

    def start(
        function,
        args=(),
        kwargs=None,
        *rest,
        _start=_thread.start_new_thread,
        _state=state,
        _record=record,
    ):
        if _state["active"]:
            _record("machinery", "started a thread during a hidden test")
        return _start(function, args, kwargs or {}, *rest)

    _thread.start_new_thread = start
    setattr(threading, "_start_new_thread", start)  # noqa: B010 (a private name of threading)
    protected.append(start)


# Installing a package runs no code in the kernel (it imports only the declared
# environment, and pip writes to the scratch space): not a finding.
_INSTALL = __import__("re").compile(
    r"\s*(\S*/)?(sh -c )?(pip3?|python3? -m pip|conda|mamba|micromamba|uv pip)\s+install\b"
    r"[^;&|`$<>()\n]*$"
)


def _command(args):
    """The command line of a process-starting audit event, as one string."""
    parts = []
    for arg in args:
        if isinstance(arg, (str, bytes)):
            parts.append(arg if isinstance(arg, str) else arg.decode(errors="replace"))
        elif isinstance(arg, (list, tuple)):
            parts.extend(str(a) for a in arg)
    text = " ".join(parts)
    return text.split(" -c ", 1)[1] if " -c " in text else text


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
        if real.startswith("/proc/") and any(part in real for part in _private_proc):
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
            refuse("machinery", f"{event}() walks the interpreter's objects")
        elif event in ("object.__getattr__", "object.__setattr__"):
            if args and any(args[0] is f for f in protected_functions):
                refuse("machinery", f"{event.split('.')[1]} {args[1]} of the grader's watch")
            if len(args) > 1 and args[1] in _frames and candidate_reads_frames():
                _record("machinery", f"reads {args[1]}: interpreter frames reach the grader")
        elif event == "sys._getframe":
            if candidate_reads_frames():
                _record("machinery", "reads interpreter frames (sys._getframe, inspect)")
        elif event in ("sys.settrace", "sys.setprofile", "sys._current_frames", "sys.addaudithook"):
            _record("machinery", f"{event}()")
        elif event.startswith("ctypes."):
            _record("machinery", f"{event} (ctypes reaches below Python)")
        elif _state["active"]:
            _record("machinery", f"{event} during a hidden test")
        elif event in ("os.fork", "os.forkpty"):
            if not shell_escape():  # IPython's !cmd forks, then the command is judged
                _record("machinery", f"{event}: a copy of the kernel the grader does not watch")
        elif not _install(_command(args)):
            _record("machinery", f"{event}: runs a program the grader does not watch")

    return hook


def _local_module(top, workdir):
    """A module the notebook wrote into its own folder (its code is watched like a cell's)."""
    return os.path.exists(os.path.join(workdir, top + ".py")) or os.path.isdir(
        os.path.join(workdir, top)
    )
