"""`--sandbox`: run the kernel under bubblewrap.

Inside: no network, a read-only view of the system, a private /tmp, its own PID namespace
(so it can neither see nor signal the grader), and one writable folder, the session's
scratch space. The kernel talks to the grader over Unix sockets in that folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from grader.errors import KernelStartError

INSTALL_HINT = "install Debian's bubblewrap package (apt-get install bubblewrap)"


def bwrap_path() -> str | None:
    """Where bubblewrap is, or None."""
    return shutil.which("bwrap")


def wrap(argv: list[str], writable: list[Path]) -> list[str]:
    """Prefix a kernel command so that it runs inside the sandbox.

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
        "--tmpfs", "/tmp",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
    ]  # fmt: skip
    for folder in _hidden_by_private_tmp():
        command += ["--ro-bind", folder, folder]
    for folder in writable:
        command += ["--bind", str(folder), str(folder)]
    return command + argv


def _hidden_by_private_tmp() -> list[str]:
    """The interpreter's own folders that live under /tmp (a virtual environment in a
    fresh clone, say): the private /tmp would hide them, so they are bound back read-only."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    folders |= {os.path.realpath(f) for f in folders}
    return sorted(f for f in folders if f == "/tmp" or f.startswith("/tmp/"))
