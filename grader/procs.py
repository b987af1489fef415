"""Finding and killing every process the candidate started, so that none outlives grading.

Each kernel is started with a per-session token in its environment. Processes inherit it,
so they are found by the token even after they double-fork away from the kernel's tree;
the kernel's live descendants are added for good measure. A process that both sheds the
token (a fresh environment) and double-forks is caught when the grader adopts orphans
(`adopt_orphans`, which the `grade` command does): it then stays below the grader.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

TOKEN_VARIABLE = "GRADER_SESSION"
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_adopting = False


def adopt_orphans() -> bool:
    """Become the reaper of this process's orphaned descendants (Linux), so that nothing the
    candidate starts can leave the grader's process tree. Only for a process that runs one
    grading at a time, such as the `grade` command: `adopted` then claims every descendant.

    Returns:
        True if the kernel agreed.
    """
    global _adopting
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _adopting = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        _adopting = False
    return _adopting


def adopted() -> set[int]:
    """Every live descendant of this process, once it adopts orphans; else nothing."""
    return descendants(os.getpid()) if _adopting else set()


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def _pids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != b"Z"


def descendants(pid: int) -> set[int]:
    """Live descendants of `pid`, read from /proc."""
    parents = {}
    for child in _pids():
        fields = _stat_fields(child)
        if fields and fields[0] != b"Z":
            parents[child] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def host_pid(inner_pid: int, pids: set[int]) -> int | None:
    """Which of `pids` is the process that calls itself `inner_pid` in its own (innermost)
    PID namespace: the same number outside a sandbox, another one inside it."""
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(b"NSpid:"):
                if int(line.split()[-1]) == inner_pid:
                    return pid
                break
    return None


def tagged(token: str) -> set[int]:
    """Live processes whose environment carries this session's token."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = set()
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ.split(b"\0") and alive(pid):
            found.add(pid)
    return found


def kill_all(pids: set[int]) -> None:
    """SIGKILL every pid, then reap those that are our own children."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    waiting = set(pids)
    deadline = time.monotonic() + 2
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: its own parent or init reaps it
                done = 0 if alive(pid) else pid
            if done:
                waiting.discard(pid)
        if waiting:
            time.sleep(0.01)
