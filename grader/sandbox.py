"""`--sandbox`: run the kernel under bubblewrap.

Inside: no network, a read-only view of the system, a private /tmp, its own PID namespace
(so it can neither see nor signal the grader), and one writable folder, the session's
scratch space. The kernel talks to the grader over Unix sockets in that folder.
"""

from __future__ import annotations

import shutil
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
    for folder in writable:
        command += ["--bind", str(folder), str(folder)]
    return command + argv
