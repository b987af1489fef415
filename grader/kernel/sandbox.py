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
grader). Its `/proc` is read-only (no `/proc/sys` write, no write of its own memory through
`/proc/self/mem`, whatever path or descriptor names it) and `/sys` is absent but for the
CPU topology, read-only. Its environment is the allow-listed one of every kernel
(grader/kernel/launch.py). With `--device cuda` the GPU's device files and `/sys` are
bound as well, read-only.

The kernel is never the host's root. Run by an ordinary user, bubblewrap makes a user
namespace and the kernel is that user. Run by root, bubblewrap makes no user namespace
(one would map the kernel to the host's uid 0, which owns `/proc/sys`): it keeps only the
capabilities to change user, and the first thing inside (`DROP`) becomes the kernel's
user, `--kernel-user`'s or an unused uid the grader picks (`launch.kernel_ids`), which
clears every capability. The view is built by root, so an interpreter under a folder
the kernel's user could not open from the host (`/root/.pyenv`, mode 0700) is still
there: bubblewrap makes the folders on the way.
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


# Run by root: the first thing inside the sandbox becomes the kernel's user (argv: uid,
# gid, then the command). Leaving uid 0 clears every capability; bubblewrap has set
# no_new_privs, so none comes back.
DROP = (
    "import os, sys; uid, gid = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)\n"
    "import ctypes, struct; ctypes.CDLL(None).capset(struct.pack('Ii', 0x20080522, 0), bytes(24))\n"
    "os.execv(sys.argv[3], sys.argv[3:])"
)


def as_root() -> bool:
    """Whether bubblewrap runs as root here (then the kernel drops to its user inside)."""
    return os.geteuid() == 0


def isolation(root: bool | None = None) -> list[str]:
    """bubblewrap's namespace and capability flags. Run by root (`root`, or by default
    whether we are): every namespace but the user's, and only the capabilities `DROP`
    needs (gone once it has run). Otherwise: a user namespace too, and no capability."""
    if as_root() if root is None else root:
        return [
            "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-drop", "ALL",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
        ]  # fmt: skip
    return ["--unshare-all", "--cap-drop", "ALL"]


def drop_to(ids: tuple[int, int] | None) -> list[str]:
    """The command prefix that becomes `ids` inside a sandbox bubblewrap built as root."""
    if ids is None or not as_root():
        return []
    return [sys.executable, "-E", "-s", "-S", "-c", DROP, str(ids[0]), str(ids[1])]


@functools.lru_cache(maxsize=4)
def available(prefix: tuple[str, ...] = ()) -> bool:
    """Whether bubblewrap is installed and can make a sandbox here (a container without
    user namespaces, or one that forbids mounts, cannot), run after `prefix` (the command
    that drops to the kernel's user, if any), with the flags a kernel's sandbox takes."""
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
                *isolation(None if not prefix else False),
                "--die-with-parent",
                "--proc",
                "/proc",
                "--remount-ro",
                "/proc",
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
    ids: tuple[int, int] | None = None,
    drop: bool = True,
) -> list[str]:
    """Prefix a kernel command so that it runs inside the sandbox (see the module
    docstring): the allowed folders read-only, `writable` bound writable, the `hidden`
    folders (the grader's suites, references and solutions) and the `private` ones (where
    other gradings keep their scratch space) empty where an allowed folder holds them.
    `/tmp` is a tmpfs of at most `tmp_bytes`. Run by root, the command runs as `ids`
    (unless not `drop`: a forked kernel's placeholder, whose kernel drops by itself).

    Raises:
        KernelStartError: bubblewrap is not installed.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise KernelStartError(
            f"the sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
        )
    command = [
        bwrap, *isolation(), "--die-with-parent", "--new-session",
        # /proc read-only: no /proc/sys write, no write of the kernel's own memory
        "--proc", "/proc", "--remount-ro", "/proc",
        "--dev", "/dev",
    ]  # fmt: skip
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            command += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            command += ["--ro-bind", folder, folder]
    visible = [f for f in SYSTEM_FOLDERS if os.path.isdir(f) and not os.path.islink(f)]
    made: set[str] = {"/tmp"}

    def way_to(place: str) -> list[str]:
        """The folders on the way to `place`, open to the kernel's user: bubblewrap would
        copy the host's modes, and a 0700 /root (or a batch's 0700 folder) would shut the
        kernel out of what is bound below it."""
        way = []
        for parent in reversed(Path(place).parents[:-1]):
            name = str(parent)
            if name not in made and not any(_under(name, v) for v in visible):
                way += ["--perms", "0755", "--dir", name]
                made.add(name)
        return way

    accounts = _accounts(writable[0], ids) if ids and as_root() and writable else {}
    for path in SYSTEM_FILES + (("/sys",) if gpu else ()):
        if os.path.exists(path):
            command += [*way_to(path), "--ro-bind", accounts.get(path, path), path]
    if gpu:
        for device in GPU_DEVICES:
            command += ["--dev-bind-try", device, device]
    size = ["--size", str(tmp_bytes)] if tmp_bytes else []
    command += [*size, "--perms", "1777", "--tmpfs", "/tmp"]
    for folder in interpreter_folders():
        if not any(_under(folder, v) for v in visible):
            command += [*way_to(folder), "--ro-bind", folder, folder]
            visible.append(folder)
    inside = [str(f) for f in (*hidden, *private) if any(_under(str(f), v) for v in visible)]
    outermost = sorted(f for f in inside if not any(_under(f, o) for o in inside if o != f))
    for folder in outermost:
        if os.path.isdir(folder):
            command += ["--tmpfs", folder, "--remount-ro", folder]
    for place in writable:
        command += [*way_to(str(place)), "--bind", str(place), str(place)]
    # The root bubblewrap builds the view on is a tmpfs of its own: read-only, so nothing
    # outside /tmp and the scratch space takes a byte.
    return [*command, "--remount-ro", "/", *(drop_to(ids) if drop else []), *argv]


KERNEL_ACCOUNT = "grader-kernel"


def _accounts(folder: Path, ids: tuple[int, int]) -> dict[str, str]:
    """/etc/passwd and /etc/group for the sandbox: the host's, plus the kernel's own uid
    and gid under `KERNEL_ACCOUNT` where the host has no such entry (code that looks its
    user up, `getpass.getuser()`, finds one), written into `folder` (root's, read-only to
    the kernel: bound read-only)."""
    made = {}
    for path, entry, taken in (
        (
            "/etc/passwd",
            f"{KERNEL_ACCOUNT}:x:{ids[0]}:{ids[1]}::{folder}:/usr/sbin/nologin\n",
            ids[0],
        ),
        ("/etc/group", f"{KERNEL_ACCOUNT}:x:{ids[1]}:\n", ids[1]),
    ):
        try:
            text = Path(path).read_text()
        except OSError:
            text = ""
        if any(line.split(":")[2:3] == [str(taken)] for line in text.splitlines()):
            continue
        copy = folder / f"sandbox-{Path(path).name}"
        copy.write_text(text + ("" if not text or text.endswith("\n") else "\n") + entry)
        copy.chmod(0o644)
        made[path] = str(copy)
    return made


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
    once. The namespace has its own /proc, read-only: the grader's processes, and their
    environments, are not there to read. Without bubblewrap, returns `argv` unchanged.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        return argv
    return [
        bwrap, "--dev-bind", "/", "/", "--proc", "/proc", "--remount-ro", "/proc",
        "--unshare-pid", "--die-with-parent", "--new-session", *argv,
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
