"""`--sandbox`: run the kernel under bubblewrap.

Inside: no network, a read-only view of the system, a private /tmp, empty home folders
(the interviewer's files are not there to read), an empty folder in place of the one
that holds the scratch spaces (TMPDIR, wherever it is: other gradings are not there to
see), empty folders where the grader's own package, suites, references and solutions
are, its own PID namespace (so it can neither see nor signal the grader), and one
writable folder, the session's scratch space. The kernel talks to the grader over Unix
sockets in that folder. Its environment is the allow-listed one of every kernel
(grader/launch.py).
"""

from __future__ import annotations

import os
import pwd
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from grader.errors import KernelStartError

INSTALL_HINT = "install Debian's bubblewrap package (apt-get install bubblewrap)"


def bwrap_path() -> str | None:
    """Where bubblewrap is, or None."""
    return shutil.which("bwrap")


def wrap(
    argv: list[str],
    writable: list[Path],
    hidden: Sequence[Path] = (),
    private: Sequence[Path] = (),
) -> list[str]:
    """Prefix a kernel command so that it runs inside the sandbox, where the `hidden`
    folders (the grader's suites, references and solutions) are empty and read-only, and
    the `private` ones (where other gradings keep their scratch space) are empty; the
    `writable` folders inside them are bound back.

    Raises:
        KernelStartError: bubblewrap is not installed.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise KernelStartError(
            f"--sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
        )
    command = [
        bwrap,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
    ]  # fmt: skip
    emptied = _private([str(f) for f in private])
    for folder in emptied:
        command += ["--tmpfs", folder]
    for folder in _interpreter_folders_under(emptied):
        command += ["--ro-bind", folder, folder]
    outermost = [
        str(f) for f in hidden if not any(_under(str(f), str(o)) for o in hidden if o != f)
    ]
    for folder in outermost:
        command += ["--tmpfs", folder, "--remount-ro", folder]
    for place in writable:
        command += ["--bind", str(place), str(place)]
    return command + argv


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


def _private(extra: Sequence[str] = ()) -> list[str]:
    """Folders replaced by empty ones: /tmp, the home folders (/home, /root and the
    grader user's own), where the interviewer's keys, notes and other submissions live,
    and the `extra` ones."""
    homes = {"/home", "/root", os.path.expanduser("~"), pwd.getpwuid(os.getuid()).pw_dir}
    wanted = {*homes, *extra}
    folders = {os.path.realpath(f) for f in wanted if os.path.isdir(f)} - {"/"} | {"/tmp"}
    # Only the outermost of nested folders: a tmpfs on /home already hides /home/me.
    return sorted(f for f in folders if not any(_under(f, other) for other in folders - {f}))


def _interpreter_folders_under(hidden: list[str]) -> list[str]:
    """The interpreter's own folders (a virtual environment in a fresh clone under /tmp, a
    pyenv Python under the home folder) that the empty folders would hide: bound back
    read-only."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    folders |= {os.path.realpath(f) for f in folders}
    return sorted(f for f in folders if any(_under(f, h) for h in hidden))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
