"""What is a finding: the machinery tables (dotted prefixes reached anywhere), the internals
and look-ups by computed name, how each line and cell magic is classed, the names that mark
check code, and the message a machinery path gets. Pure data and pure
functions; the package docstring states the rules these tables implement.
"""

from __future__ import annotations

import re
from functools import lru_cache


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _group(names: str, why: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), why)


_MACHINERY = {  # dotted prefix ('*': any continuation) -> why it is a finding anywhere
    **_group(
        "threading _thread concurrent.futures multiprocessing torch.multiprocessing "
        "asyncio.to_thread",
        "can run code the grader does not watch",
    ),
    **_group("ctypes cffi", "calls native code directly"),
    "torch.utils.cpp_extension": "compiles native code",
    **_group("gc.get_objects gc.get_referrers gc.get_referents", "walks the heap to reach objects"),
    **_group(
        "inspect.currentframe inspect.stack inspect.trace inspect.getouterframes "
        "inspect.getinnerframes inspect.getclosurevars inspect.getgeneratorlocals "
        "inspect.getcoroutinelocals inspect.unwrap sys._getframe sys._current_frames",
        "reads frames or closures",
    ),
    **_group("sys.settrace sys.setprofile sys.monitoring sys.addaudithook", "installs a hook"),
    **_group("sys.modules __main__ builtins", "reaches modules or builtins by name"),
    **_group("sys.meta_path sys.path_hooks", "changes how imports work"),
    **_group("importlib builtin:__import__", "imports by computed name"),
    **_group("torch.library torch.ops", "calls or overrides torch operators directly"),
    **_group("torch.overrides torch.utils._python_dispatch", "manipulates torch's modes"),
    **_group("torch._C torch._dynamo", "reaches into torch's internals"),
    **_group(
        "torch.jit.load torch.package torch.hub pickle marshal dill cloudpickle",
        "loads code the scan does not see",
    ),
    **_group(
        "builtin:eval builtin:exec builtin:compile code codeop runpy doctest timeit.timeit "
        "timeit.repeat timeit.Timer cProfile.run cProfile.runctx profile.run profile.runctx "
        "pdb.run pdb.runeval pdb.runctx",
        "runs code from a string",
    ),
    **_group(
        "operator.attrgetter operator.methodcaller pydoc.locate pkgutil.resolve_name",
        "looks up objects by string",
    ),
    **_group(
        "builtin:globals().update builtin:globals().setdefault builtin:globals().__setitem__ "
        "builtin:vars().update builtin:locals().update",
        "writes the notebook's namespace by computed name",
    ),
    **_group("grader exercises", "reaches the grader's own code"),
    **_group("subprocess os.system os.popen", "runs a shell command"),
    **_group("os.fork* os.exec* os.spawn* os.posix_spawn* posix pty", "starts a process"),
    **_group(
        "IPython.get_ipython IPython.core ipykernel", "can run code outside the scanned cells"
    ),
}
_INTERNALS = _words(
    "__code__ __closure__ __globals__ __wrapped__ __subclasses__ __builtins__ co_consts co_code "
    "co_names f_back f_locals f_globals f_builtins f_code tb_frame gi_frame cr_frame ag_frame"
)
_NAMESPACES = frozenset({"builtin:globals", "builtin:vars", "builtin:locals"})
_NAMESPACE_OBJECTS = frozenset(f"{name}()" for name in _NAMESPACES)  # what they return
_LOOKUPS = frozenset({"builtin:getattr", "builtin:setattr", "builtin:delattr", "builtin:hasattr"})
_DUNDER_LOOKUPS = {"__getattribute__": 1, "__getattr__": 1, "__delattr__": 1, "__setattr__": 2}

_STARRED = tuple((key[:-1], why) for key, why in _MACHINERY.items() if key.endswith("*"))
_ROOTS = frozenset(key.split(".")[0].rstrip("*") for key in _MACHINERY)


@lru_cache(maxsize=8192)
def _machinery(path: str) -> str | None:
    """'uses X, which ...' when the path is machinery."""
    parts = path.split(".")
    if parts[0] not in _ROOTS:
        return None
    for i in range(1, len(parts) + 1):
        key = ".".join(parts[:i])
        if key in _MACHINERY:
            return f"uses {_shown(key)}, which {_MACHINERY[key]}"
    for prefix, why in _STARRED:
        if path.startswith(prefix):
            return f"uses {path.split('(')[0]}, which {why}"
    return None


def _shown(key: str) -> str:
    return f"{key[8:]}()" if key.startswith("builtin:") else key


# how each magic is classed (the package docstring's Magics)
_PYTHON_LINE = {"time": "", "timeit": "nrp", "prun": "DlsT"}  # name -> options taking a value
_PYTHON_CELL = frozenset({"time", "timeit", "capture", "prun"})
_HARMLESS_LINE = _words(
    """matplotlib pylab who who_ls whos pwd precision pinfo pinfo2 pdef pdoc psource pfile
    psearch pycat lsmagic magic quickref history hist xmode colors pprint tb dirs dhist page
    less more man clear automagic doctest_mode pdb logstart logon logoff logstate logstop
    reset reset_selective xdel gui notebook autosave connect_info killbgscripts
    pastebin"""
)
_SHELL_LINE = _words(
    """pip conda mamba micromamba uv sx system sc alias unalias rehashx cat cp ls ll lf lk
    ldir lx mkdir mv rm rmdir"""
)
_CODE_LINE = _words(
    """run load loadpy load_ext reload_ext unload_ext autoreload aimport macro recall rep
    rerun edit ed store save debug code_wrap alias_magic autocall qtconsole"""
)
# Installing a package brings no code into the notebook: the kernel imports only the
# declared grading environment, and pip writes to the scratch space.
_INSTALL = re.compile(
    r"\s*(pip3?|python3? -m pip|conda|mamba|micromamba|uv pip)\s+install\b[^;&|`$<>()\n]*$"
)
_SETTINGS_LINE = _words("config env set_env cd pushd popd bookmark autoawait subshell")
_PYTHON_FILE = re.compile(r".*\.(py|pyw|pyc|pyd|pth|so)$", re.IGNORECASE)

# names: check code
_CHECK_NAME = re.compile(
    r"_*(test|check|compare|verify|validate|sanity|demo|run_)|.*tests?$|main$", re.IGNORECASE
)
_MAX_DEPTH = 5  # magic bodies nested deeper than this are a finding, not scanned
