"""How the candidate's kernel process is launched: its command (memory cap, sandbox), its
environment, its private folder, the code that installs the shim, and whether it forks
from the warm template. Light (no Jupyter): the CLI starts the template through it before
anything heavy is imported. The Jupyter side is `grader.kernel.manager`."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from grader.core.errors import KernelStartError
from grader.core.limits import Limits
from grader.kernel import processes as procs
from grader.kernel import sandbox, syscalls, template

_HERE = Path(__file__).parent
# The kernel-side code: the guard first (the shim's install calls it), the wire format, the
# profile's measurements, then the shim.
SHIM_SOURCE = "\n\n".join(
    (_HERE / name).read_text() for name in ("guard.py", "wire.py", "measure.py", "shim.py")
)
# Always importable by candidates besides the standard library and the declared packages.
RUNTIME_PACKAGES = ("torch", "IPython", "ipykernel")
# Runs in an interpreter that ignores PYTHON* variables, the user site and site processing
# (`-E -s -S -B`; not `-I`, which would keep IPython from adding the notebook's folder to
# the path): asks Linux to kill the kernel when the grader dies (PR_SET_PDEATHSIG, and
# exits if the grader is already gone), sets the address-space limit, puts exactly the
# grading environment on the path, and runs the kernel (argv: limit, path as JSON, the
# grader's pid or 0, the call channel's reading end or -1, the seccomp filter in hex (see
# grader/kernel/syscalls.py: ptrace and process_vm_writev refused), kernel arguments...). So no
# .pth file, sitecustomize, user site or PYTHON* variable a notebook may have planted
# takes effect. A thread waits for the call channel to hang up (only the grader holds
# its writing end): when the grader is gone, however it went, the kernel exits, even where
# the parent-death signal could not be set in time (a grader killed while bubblewrap
# starts, under load).
_LAUNCH = syscalls.INSTALL + (
    "import ctypes, json, os, resource, runpy, select, sys, threading; n = int(sys.argv[1])\n"
    "ctypes.CDLL(None).prctl(1, 9)\n"
    "if int(sys.argv[3]) not in (0, os.getppid()): os._exit(1)\n"
    "def _hangup(fd=int(sys.argv[4]), poll=select.poll(), gone=select.POLLHUP | select.POLLERR):\n"
    "    poll.register(fd, 0)\n"
    "    while not any(event & gone for _, event in poll.poll()): pass\n"
    "    os._exit(1)\n"
    "if int(sys.argv[4]) >= 0: threading.Thread(target=_hangup, daemon=True).start()\n"
    "if n: resource.setrlimit(resource.RLIMIT_AS, (n, n))\n"
    "_refuse_syscalls(sys.argv[5])\n"
    "sys.path[:] = json.loads(sys.argv[2]); sys.argv = ['ipykernel_launcher', *sys.argv[6:]]\n"
    "runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)"
)


def sandboxed(limits: Limits) -> bool:
    """Whether a grading with these limits runs its kernel in the sandbox: as asked
    (`--sandbox`, `--no-sandbox`), else wherever bubblewrap works."""
    if limits.sandbox is not None:
        return limits.sandbox
    return sandbox.available()


def contained(limits: Limits) -> bool:
    """Whether a kernel with these limits runs in a PID namespace of its own (sandboxed,
    or contained wherever bubblewrap works)."""
    if sandboxed(limits):
        return True
    ids = kernel_ids(limits)
    return sandbox.available(tuple(start_prefix(ids=ids)) if ids else ())


def cold_reason(limits: Limits) -> str:
    """Why a kernel with these limits boots cold, or "" when it forks from the template."""
    return template.cold_reason(limits, contained(limits))


def warm_up(limits: Limits, *, for_children: bool = False) -> bool:
    """Start this process's template now if kernels with these `limits` fork from it (so
    that it loads while the grader loads its suites); whether they do. A template shared
    by our parent (`share_template`) is used instead of starting one, unless our own
    children (a batch's workers) are to fork from it: it serves only its owner's children.
    """
    if cold_reason(limits):
        return False
    env = template_environment()
    return not template.for_this_process(env, template_key(), for_children=for_children).broken


def share_template() -> dict[str, str]:
    """Start this process's template and return the variable that lets the `grade`
    commands it runs (its direct children) fork their kernels from it, each paying no
    template boot of its own (about 2.4 s of CPU): for a program that runs `grade` many
    times, such as this project's tests. Empty where kernels start cold.

    A `grade` uses it only if it was started by the same interpreter and grader code, with
    the same variables passed to kernels; otherwise, or if it has gone, the `grade` starts
    its own as usual.
    """
    if cold_reason(Limits()):
        return {}
    key = template_key()
    shared = template.for_this_process(template_environment(), key, for_children=True)
    return {} if shared.broken else {template.SHARE_VARIABLE: f"{key} {shared.address}"}


def template_key() -> str:
    """What a template's kernels depend on besides each grading's own: the interpreter,
    the grader's code for the kernels, and the variables every kernel is passed."""
    return template.fingerprint(passed_environment())


def template_environment() -> dict[str, str]:
    """The template's environment: the allow-listed variables every kernel gets, and
    nothing of any grading (no token, no home of its own)."""
    env = kernel_environment(Path(tempfile.gettempdir()), "")
    env.pop(procs.TOKEN_VARIABLE, None)
    return env


# Where the grader picks the kernel's uid when it runs as root and no --kernel-user is
# given: the first uid (and gid) from here that no account or group on the machine uses.
AUTO_IDS_FROM = 61000


def kernel_ids(limits: Limits) -> tuple[int, int] | None:
    """(uid, gid) the kernel runs as, or None (the grader's own user, never root).

    Run by root, the kernel is never root: `--kernel-user`'s ids, else an unused uid
    (`auto_ids`). Unsandboxed, the kernel's user must reach the interpreter from the host
    (inside the sandbox bubblewrap builds the way to it as root): where it cannot, the
    kernel stays root, and the card says so (`kernel_user`).

    Raises:
        KernelStartError: there is no such user.
    """
    if os.geteuid() != 0:
        return None
    if limits.kernel_user:
        import pwd

        try:
            entry = pwd.getpwnam(limits.kernel_user)
        except KeyError:
            raise KernelStartError(f"--kernel-user {limits.kernel_user}: no such user") from None
        return entry.pw_uid, entry.pw_gid
    if sandboxed(limits) or not unreachable_for_others():
        return auto_ids()
    return None


@functools.lru_cache(maxsize=1)
def auto_ids() -> tuple[int, int]:
    """An unused uid and gid (the same number) for kernels of a grader run by root: no
    account's files are the kernel's, and no process of the machine is its to signal."""
    import grp
    import pwd

    uid = AUTO_IDS_FROM
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            try:
                grp.getgrgid(uid)
            except KeyError:
                return uid, uid
        uid += 1


@functools.lru_cache(maxsize=1)
def unreachable_for_others() -> str:
    """The first folder of the interpreter's a user other than its owner cannot reach from
    the host (a folder on the way that others may not enter, as /root is), or ""."""
    for place in {os.path.realpath(sys.executable), *sandbox.interpreter_folders()}:
        for folder in [*reversed(Path(place).parents), Path(place)]:
            try:
                mode = folder.stat().st_mode
            except OSError:
                return str(folder)
            if not mode & 0o001:
                return str(folder)
    return ""


def kernel_user(limits: Limits) -> str:
    """Who the kernel runs as, for the card: "" for the grader's own (unprivileged) user;
    as root, "uid N (picked)" (the uid `auto_ids` chose), the --kernel-user's name, or
    "root (why)" where it could not be dropped."""
    if os.geteuid() != 0:
        return ""
    ids = kernel_ids(limits)
    if ids is None:
        return f"root ({unreachable_for_others()} is closed to other users; not sandboxed)"
    if limits.kernel_user:
        return limits.kernel_user
    return f"uid {ids[0]} (picked)"


# The first thing every kernel runs (argv: the grader's pid, the memory cgroup's
# cgroup.procs or "", uid and gid or "", then the command): joins the cgroup, drops to the
# kernel's user, asks Linux to kill it when the grader dies (after the user change, which
# would clear the request), exits if the grader is already gone (a grader killed between
# its fork and here would otherwise leave it behind), then runs the command.
_START = (
    "import ctypes, os, sys; grader, procs, uid, gid = sys.argv[1:5]\n"
    "if procs: open(procs, 'w').write(str(os.getpid()))\n"
    "if uid: os.setgroups([]); os.setgid(int(gid)); os.setuid(int(uid))\n"
    "ctypes.CDLL(None).prctl(1, 9)\n"
    "if os.getppid() != int(grader): os._exit(1)\n"
    "os.execv(sys.argv[5], sys.argv[5:])"
)


def start_prefix(group: Path | None = None, ids: tuple[int, int] | None = None) -> list[str]:
    """What runs a kernel's command (see `_START`): in `group` (a memory cgroup), as
    `ids` (uid, gid), dying with this process."""
    uid, gid = ("", "") if ids is None else (str(ids[0]), str(ids[1]))
    procs = "" if group is None else str(group / "cgroup.procs")
    return [sys.executable, "-E", "-s", "-S", "-c", _START, str(os.getpid()), procs, uid, gid]


def hand_over(path: Path, ids: tuple[int, int] | None) -> None:
    """Give the kernel's user a folder or file of the session (its scratch space, its
    connection file); nothing to do when the kernel runs as the grader's own user."""
    if ids is not None:
        os.chown(path, *ids)


# What the kernel inherits from the grader's environment: what Python, torch and Jupyter
# need, nothing else (the interviewer's tokens and keys stay out of the candidate's reach).
PASSED_VARIABLES = (
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF", "GRADER_DEBUG",
)  # fmt: skip
PASSED_PREFIXES = ("LC_",)
SYSTEM_CONFIG_FOLDERS = (
    "/etc/ipython", "/usr/local/etc/ipython", "/etc/jupyter", "/usr/local/etc/jupyter",
    "/usr/share/jupyter", "/usr/local/share/jupyter",
)  # fmt: skip


def passed_environment() -> dict[str, str]:
    """The variables of ours that every kernel gets (`PASSED_VARIABLES`)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name in PASSED_VARIABLES or name.startswith(PASSED_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    return env


def kernel_environment(home: Path, token: str) -> dict[str, str]:
    """The kernel's environment: the allow-listed variables of ours, then its own home,
    temporary folder and settings. A fresh `home` per kernel: nothing a notebook plants
    there (IPython startup files, Jupyter configuration) reaches the next kernel."""
    env = passed_environment()
    env.update(
        {
            procs.TOKEN_VARIABLE: token,
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "IPYTHONDIR": str(home / ".ipython"),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(home / ".local" / "share" / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(home / ".local" / "share" / "jupyter" / "runtime"),
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(home / ".matplotlib"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PIP_TARGET": str(home / "pip-target"),
            "PIP_NO_INPUT": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            # torch.compile and torch.jit.script hand back the notebook's own code, run
            # eagerly and watched like the rest (no compiler starts during the tests)
            "TORCHDYNAMO_DISABLE": "1",
            "PYTORCH_JIT": "0",
        }
    )
    return env


def start_options(home: Path, workdir: Path, token: str, fds: tuple[int, ...]) -> dict[str, Any]:
    """Keyword arguments for starting the kernel process; it inherits `fds` (the writing
    end of the guard's record channel, its ends of the call channel), and nothing else of
    ours but what `kernel_environment` passes.

    Its own stdout/stderr are dropped: candidate output arrives through Jupyter, bounded,
    or not at all (GRADER_DEBUG=1 sends them to the grader's stderr). Its environment
    keeps it from changing the grading environment: no user site, and `pip install`
    goes to the scratch space.
    """
    debug = bool(os.environ.get("GRADER_DEBUG"))
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return {
        "cwd": str(workdir),
        "env": kernel_environment(home, token),
        "stdin": subprocess.DEVNULL,
        "stdout": sys.stderr.fileno() if debug else subprocess.DEVNULL,
        "stderr": None if debug else subprocess.DEVNULL,
        "pass_fds": fds,
    }


def grader_folders() -> list[Path]:
    """The grader's own files: its package (suites and references included), every other
    installed copy of it on the path, and, when it runs from a source tree, the tree's
    exercises/, solutions/ and tests/ folders."""
    import grader

    package = Path(grader.__file__).resolve().parent
    folders = {package, (package / "exercises").resolve()}
    exercises = sys.modules.get("grader.exercises")  # and any folder it loads from
    folders |= {Path(p).resolve() for p in getattr(exercises, "__path__", ())}
    for entry in sys.path:
        copy = Path(entry or ".").resolve() / package.name
        if (copy / "kernel" / "shim.py").is_file() or (copy / "shim.py").is_file():
            folders |= {copy, (copy / "exercises").resolve()}
    tree = package.parent
    if (tree / "pyproject.toml").is_file():
        folders |= {tree / "exercises", tree / "solutions", tree / "tests"}
    return sorted(f for f in folders if f.exists())


def environment_folders() -> list[str]:
    """Where the grading environment lives, with the system-wide IPython and Jupyter
    configuration every kernel reads: written by nothing that runs in the kernel."""
    import site

    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    folders |= {*SYSTEM_CONFIG_FOLDERS}
    with contextlib.suppress(Exception):
        folders.add(site.getusersitepackages())
    return sorted(folders)


def environment_snapshot() -> dict[str, int]:
    """The entries of the site-packages folders, with their modification times: what a
    `pip install` or a planted .pth file changes."""
    import site

    snapshot = {}
    for folder in site.getsitepackages():
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                if entry.name == "__pycache__":  # the grader's own imports write there
                    continue
                with contextlib.suppress(OSError):
                    snapshot[entry.path] = entry.stat(follow_symlinks=False).st_mtime_ns
    return snapshot


def environment_changes(before: dict[str, int], after: dict[str, int]) -> str:
    """'added a, b; changed c' (names only), or '' when nothing changed."""
    added = sorted(os.path.basename(p) for p in after.keys() - before.keys())
    removed = sorted(os.path.basename(p) for p in before.keys() - after.keys())
    changed = sorted(
        os.path.basename(p) for p in after.keys() & before.keys() if after[p] != before[p]
    )
    parts = [
        f"{verb} {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
        for verb, names in (("added", added), ("removed", removed), ("changed", changed))
        if names
    ]
    return "; ".join(parts)


def guard_config(workdir: Path, private: list[Path], packages: tuple[str, ...]) -> dict[str, Any]:
    """What the kernel-side guard needs to know (see grader/kernel/guard.py)."""
    import grader

    return {
        "workdir": str(workdir),
        "hidden": [str(p) for p in (*grader_folders(), *private)],
        "environment": environment_folders(),
        "allowed_imports": [*RUNTIME_PACKAGES, *packages],
        "blocked_imports": [grader.__name__],
    }


# What a folder made by `scratch_root` adds to its parent's path: "/grader-" and 8 letters.
SCRATCH_NAME_CHARS = 16


def scratch_root(room: int = 0) -> Path:
    """A private folder for the session (or, with `room`, one whose path leaves that many
    characters for what goes in it: a batch's, which holds its sessions' folders). Unix
    socket paths must stay under ~100 bytes, so a deep TMPDIR gives way to /tmp."""
    root = Path(tempfile.mkdtemp(prefix="grader-"))
    if len(str(root)) > 60 - room and Path("/tmp").is_dir():
        root.rmdir()
        root = Path(tempfile.mkdtemp(prefix="grader-", dir="/tmp"))
    return root


def install_code(
    module_name: str, records_fd: int, config: dict[str, Any], cell_output: int, total_output: int
) -> str:
    """One cell that loads the guard and the shim from source into a fresh module
    `module_name` and installs them."""
    body = (
        "import sys, types\n"
        f"module = types.ModuleType({module_name!r})\n"
        "module.__file__ = '<grader-shim>'\n"
        f"exec(compile({SHIM_SOURCE!r}, '<grader-shim>', 'exec'), module.__dict__)\n"
        f"module.install({records_fd}, {config!r}, {cell_output}, {total_output})\n"
        "sys.modules[module.__name__] = module\n"
    )
    return f"exec(compile({body!r}, '<grader-install>', 'exec'), {{}})"
