"""The sandbox: the kernel under bubblewrap, on by default wherever bubblewrap works.

An allow-list with no privileges. Inside, the kernel sees the system's programs and
libraries (`/usr` and its links, a few files of `/etc` the loader and libc read) and the
interpreter's own folders (its prefix, its virtual environment, site-packages), all
read-only; a private, size-bounded `/tmp`; and one writable folder, the session's scratch
space, where it talks to the grader over Unix sockets. Nothing else of the disk is there:
no home folder, no clone of the grader (its `solutions/`, `exercises/`, `tests/`), no other
grading. Where the grader's package lies inside an allowed folder (an installed copy in
site-packages), an empty folder takes its place. It holds no capabilities and cannot gain
any (`--cap-drop ALL`; bubblewrap sets `no_new_privs`), whoever runs the grader, root
included; it has no network, and its own PID namespace (it can neither see nor signal the
grader). Its environment is the allow-listed one of every kernel (grader/kernel/launch.py).
With `--device cuda` the GPU's device files and `/sys` are bound as well.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from grader.core.errors import KernelStartError

INSTALL_HINT = "install Debian's bubblewrap package (apt-get install bubblewrap)"


def bwrap_path() -> str | None:
    """Where bubblewrap is, or None."""
    return shutil.which("bwrap")


# The system's programs and libraries (merged-/usr systems make the others links).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/conda")
# What the loader, libc and Python read from /etc: no secrets, no configuration of ours.
SYSTEM_FILES = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/alternatives", "/etc/mime.types",
    "/sys/devices/system/cpu",
)  # fmt: skip
# The GPU, for --device cuda: its device files, and what the driver reads.
GPU_DEVICES = (
    "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
    *(f"/dev/nvidia{n}" for n in range(16)),
)  # fmt: skip
DEFAULT_TMP_BYTES = 256 * 1024**2


@functools.lru_cache(maxsize=4)
def available(prefix: tuple[str, ...] = ()) -> bool:
    """Whether bubblewrap is installed and can make a sandbox here (a container without
    user namespaces, or one that forbids mounts, cannot), run after `prefix` (the command
    that drops to the kernel's user, if any)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return False
    try:
        done = subprocess.run(
            [
                *prefix,
                bwrap,
                "--ro-bind",
                "/",
                "/",
                "--unshare-all",
                "--die-with-parent",
                "--cap-drop",
                "ALL",
                "true",
            ],  # fmt: skip
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def wrap(
    argv: list[str],
    writable: list[Path],
    hidden: Sequence[Path] = (),
    private: Sequence[Path] = (),
    tmp_bytes: int | None = DEFAULT_TMP_BYTES,
    gpu: bool = False,
) -> list[str]:
    """Prefix a kernel command so that it runs inside the sandbox (see the module
    docstring): the allowed folders read-only, `writable` bound writable, the `hidden`
    folders (the grader's suites, references and solutions) and the `private` ones (where
    other gradings keep their scratch space) empty where an allowed folder holds them.
    `/tmp` is a tmpfs of at most `tmp_bytes`.

    Raises:
        KernelStartError: bubblewrap is not installed.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise KernelStartError(
            f"the sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
        )
    command = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
        "--proc", "/proc",
        "--dev", "/dev",
    ]  # fmt: skip
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            command += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            command += ["--ro-bind", folder, folder]
    for path in SYSTEM_FILES + (("/sys",) if gpu else ()):
        command += ["--ro-bind-try", path, path]
    if gpu:
        for device in GPU_DEVICES:
            command += ["--dev-bind-try", device, device]
    command += [*(["--size", str(tmp_bytes)] if tmp_bytes else []), "--tmpfs", "/tmp"]
    visible = [f for f in SYSTEM_FOLDERS if os.path.isdir(f) and not os.path.islink(f)]
    for folder in interpreter_folders():
        if not any(_under(folder, v) for v in visible):
            command += ["--ro-bind", folder, folder]
            visible.append(folder)
    inside = [str(f) for f in (*hidden, *private) if any(_under(str(f), v) for v in visible)]
    outermost = sorted(f for f in inside if not any(_under(f, o) for o in inside if o != f))
    for folder in outermost:
        if os.path.isdir(folder):
            command += ["--tmpfs", folder, "--remount-ro", folder]
    for place in writable:
        command += ["--bind", str(place), str(place)]
    # The root bubblewrap builds the view on is a tmpfs of its own: read-only, so nothing
    # outside /tmp and the scratch space takes a byte.
    return [*command, "--remount-ro", "/", *argv]


def interpreter_folders() -> list[str]:
    """The interpreter's own folders: its prefixes (a virtual environment and the Python
    it was made from), where the executable is, and the kernel's import path (standard
    library and site-packages), outermost first."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    folders |= {os.path.dirname(os.path.realpath(sys.executable))}
    folders |= {p for p in kernel_path() if os.path.isdir(p)}
    real = {os.path.realpath(f) for f in folders} | folders
    found = sorted(f for f in real if os.path.isdir(f))
    return [f for f in found if not any(_under(f, o) for o in found if o != f)]


def contain(argv: list[str]) -> list[str]:
    """Prefix a kernel command so that it runs in a PID namespace of its own, and nothing
    else changes (same files, network and user). Every process the notebook starts stays
    in the namespace, however it forks; when the namespace's first process dies (with
    the grader, or killed at the end of grading) the Linux kernel kills all of them at
    once. The namespace has its own /proc: the grader's processes, and their
    environments, are not there to read. Without bubblewrap, returns `argv` unchanged.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        return argv
    return [
        bwrap, "--dev-bind", "/", "/", "--proc", "/proc", "--unshare-pid",
        "--die-with-parent", "--new-session", *argv,
    ]  # fmt: skip


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def kernel_path() -> list[str]:
    """The kernel's import path: the grader's own, limited to the interpreter's folders
    (standard library and site-packages), so that paths a .pth file added are not on it.
    (IPython puts the notebook's own folder in front of site-packages, as usual.)"""
    prefixes = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    path = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and any(real == p or real.startswith(p + os.sep) for p in prefixes):
            path.append(entry)
    return list(dict.fromkeys(path))
