"""Finding and killing every process the candidate started, so that none outlives grading.

Each kernel is started with a per-session token in its environment. Processes inherit it,
so they are found by the token even after they double-fork away from the kernel's tree;
the kernel's live descendants are added for good measure. A process that both sheds the
token (a fresh environment) and double-forks is caught when the grader adopts orphans
(`adopt_orphans`, which the `grade` command does): it then stays below the grader, which
reaps each one as it exits (`reap_orphans`): left as zombies, a process that forks a
thousand times a second would take every pid of the machine within seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

TOKEN_VARIABLE = "GRADER_SESSION"
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_adopting = False
_kernels: dict[str, set[int]] = {}  # session token -> its kernel's pids (see register_kernel)


def adopt_orphans() -> bool:
    """Become the reaper of this process's orphaned descendants (Linux), so that nothing the
    candidate starts can leave the grader's process tree. For a process that runs one
    grading at a time (the `grade` command, a batch worker): `adopted` then claims every
    descendant but the kernels other sessions registered (`register_kernel`).

    Returns:
        True if the kernel agreed.
    """
    global _adopting, _reaper
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _adopting = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        _adopting = False
    if _adopting and _reaper != os.getpid():  # (a forked batch worker has no thread yet)
        _reaper = os.getpid()
        threading.Thread(target=_reap_forever, name="grader-reaper", daemon=True).start()
    return _adopting


# -- reaping orphans ------------------------------------------------------------------

REAP_SECONDS = 0.05  # how often the reaper looks for exited orphans
# How often it looks past an exited child of our session that waits ahead of them (one
# may wait all grading long: bubblewrap's inner process, left to us by a finished probe),
# while the last look found no orphan (after one that did: at once)
SCAN_SECONDS = 0.5
_next_scan = 0.0
_reaper = 0  # the pid of the process whose reaper thread runs
_spawn_lock = threading.Lock()
_leaders: dict[int, bytes] = {}  # our own children in sessions of their own -> start time


@contextlib.contextmanager
def spawning() -> Iterator[Callable[[int], None]]:
    """Hold while this process starts a child in a session of its own (a cold kernel),
    and pass the child's pid to the function it yields before leaving: the reaper then
    leaves that child's exit to its Popen, as it does for every child in our session."""
    with _spawn_lock:
        yield _own


def _fresh_lock_in_child() -> None:
    """A process forked while the reaper held the lock (a batch's worker) gets it free."""
    global _spawn_lock
    _spawn_lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def _own(pid: int) -> None:
    fields = _stat_fields(pid)
    if fields:
        _leaders[pid] = fields[19]


def _reap_forever() -> None:
    session = os.getsid(0)
    while True:
        time.sleep(REAP_SECONDS)
        reap_orphans(session)


def reap_orphans(session: int) -> int:
    """Reap every exited child of ours that is an orphan we adopted: one in a session other
    than ours (`session`), and not a session leader we started (`spawning`). Our own
    children stay for their Popen to reap, which keeps their exit status (and so does an
    orphan left in our session, bubblewrap's inner process after a probe: one, which
    waits for the kill rounds at the end). The number reaped."""
    reaped = 0
    while True:
        try:  # the first exited child, left unreaped
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if info is None:
            return reaped
        if not _reap_if_orphan(info.si_pid, session):
            break  # one of ours waits for its Popen, ahead of the others
        reaped += 1
    global _next_scan
    if time.monotonic() < _next_scan:
        return reaped
    found = 0
    for pid in _pids():  # look past it: every exited child of ours, from /proc
        fields = _stat_fields(pid)
        if fields and fields[0] == b"Z" and int(fields[1]) == os.getpid():
            found += _reap_if_orphan(pid, session)
    _next_scan = time.monotonic() + (0 if found else SCAN_SECONDS)  # orphans come: look on
    return reaped + found


def _reap_if_orphan(pid: int, session: int) -> bool:
    """Reap `pid`, an exited child of ours, if it is an adopted orphan."""
    with _spawn_lock:
        fields = _stat_fields(pid)
        if not fields or int(fields[3]) == session or _leaders.get(pid) == fields[19]:
            return False
        _leaders.pop(pid, None)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return True


def adopted(token: str | None = None, parents: dict[int, int] | None = None) -> set[int]:
    """Every live descendant of this process, once it adopts orphans (else nothing), less
    the kernels of sessions other than `token`'s and what runs below them: a batch worker
    starts the next notebook's kernel while the current one still runs."""
    if not _adopting:
        return set()
    parents = parent_map() if parents is None else parents
    found = descendants(os.getpid(), parents=parents)
    spared = {pid for other, pids in list(_kernels.items()) if other != token for pid in pids}
    spared &= found
    return found - spared - descendants(*spared, parents=parents)


def register_kernel(token: str, *pids: int | None) -> None:
    """A session's kernel is running (until `forget_kernel`): `adopted` spares it, and
    the other `pids` of its line (a forked kernel's sandbox), for the other sessions of
    this process (and the warm template, registered under its own key, for all of them)."""
    known = {pid for pid in pids if pid is not None}
    if known:
        _kernels[token] = known


def forget_kernel(token: str) -> None:
    """The session's kernel is gone."""
    _kernels.pop(token, None)


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


def _state(pid: int) -> bytes:
    """The state letter of `pid` (R, S, D, T for stopped, Z for zombie...); b"" if gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else b""


def cpu_ticks(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, CPU time the process used, CPU time of the children it reaped), times
    in clock ticks (user + system), read from /proc; None once it is gone."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == b"Z":
        return None
    try:
        return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
    except (IndexError, ValueError):
        return None


def command_line(pid: int, limit: int = 120) -> str:
    """What `pid` runs, as one line (empty once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return ""
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def started(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot), to tell it from a later process given
    the same number (a process that keeps forking goes through the pids in seconds);
    None once it is gone."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields and fields[0] != b"Z" else None
    except (IndexError, ValueError):
        return None


def identities(pids: tuple[int, ...]) -> dict[int, int]:
    """Each live pid's start time (`started`): which processes the numbers stand for now."""
    found = {pid: started(pid) for pid in pids}
    return {pid: start for pid, start in found.items() if start is not None}


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    return _state(pid) not in (b"", b"Z")


def parent_map() -> dict[int, int]:
    """Every live process's parent, in one pass over /proc."""
    parents = {}
    for child in _pids():
        fields = _stat_fields(child)
        if fields and fields[0] != b"Z":
            parents[child] = int(fields[1])
    return parents


def descendants(*pids: int, parents: dict[int, int] | None = None) -> set[int]:
    """Live descendants of `pids`, read from /proc (or from `parents`, one `parent_map`
    for several questions about the same moment)."""
    parents = parent_map() if parents is None else parents
    found: set[int] = set()
    frontier = set(pids)
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


def _signal(pids: set[int], sig: signal.Signals) -> None:
    """Send `sig` to every pid, skipping those gone or not ours to signal."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _lineage() -> set[int]:
    """This process and its ancestors: never to be signalled, whatever a finder returns."""
    lineage: set[int] = set()
    pid = os.getpid()
    while pid > 0 and pid not in lineage:
        lineage.add(pid)
        fields = _stat_fields(pid)
        pid = int(fields[1]) if fields else 0
    return lineage


def kill_all(pids: set[int]) -> None:
    """SIGKILL every pid, then wait (up to 2 s) until each is dead, reaping those that are
    our own children. One snapshot: see `kill_until_none` for processes that keep forking."""
    _signal(pids, signal.SIGKILL)
    waiting = set(pids)
    deadline = time.monotonic() + 2
    pause = 0.001  # most die within a millisecond; a big kernel's memory takes longer
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: its own parent or init reaps it
                done = 0 if alive(pid) else pid
            if done:
                waiting.discard(pid)
        if waiting:
            time.sleep(pause)
            pause = min(2 * pause, 0.01)


def kill_until_none(find: Callable[[], set[int]], bound: float = 10.0) -> set[int]:
    """Kill every process `find` returns, again and again, until none is left.

    One look at /proc is not enough: a process that keeps forking (or one that forks and
    exits, so that its pid changes every millisecond) is gone from the list by the time it
    is signalled, and its child was not on it. So each round first freezes: it SIGSTOPs
    what `find` returns and looks again, until a look shows nothing that is not already
    stopped (a stopped process cannot fork; a fork under way completes, and the next look
    finds the child); then it SIGKILLs them all. It ends after several quiet looks in a
    row: a look is quiet when `find` returns nothing and, once we adopt orphans, no child
    of ours exited since the last one (a process that forks and exits leaves its child to
    us, so a walk too quick for /proc still shows). When nothing forks, that is a few
    looks and no more than a few milliseconds of sleep.

    This process and its ancestors are never signalled, whatever `find` returns.

    Args:
        find: Returns the live pids to kill now, e.g. `tagged` | `descendants`; it is
            called often, so it is best cheap.
        bound: Seconds after which to give up.

    Returns:
        The pids still alive when the bound passed; empty once none is left.
    """
    deadline = time.monotonic() + bound
    spared = _lineage()
    quiet = 0
    while quiet < _QUIET_LOOKS and time.monotonic() < deadline:
        found = {pid for pid in find() - spared if alive(pid)}
        exited = _reap_exited()
        if not found:
            quiet = 0 if exited else quiet + 1
            if quiet < _QUIET_LOOKS:
                time.sleep(0.002 if exited or quiet else 0)
            continue
        quiet = 0
        stopped: set[int] = set()
        while found - stopped and time.monotonic() < deadline:
            _signal(found - stopped, signal.SIGSTOP)
            stopped |= found
            found = find() - spared
        # The last look holds every one; of the earlier pids, only those still stopped: the
        # others died before the SIGSTOP, and their pids may have gone to someone else.
        kill_all(found | {pid for pid in stopped - found if _state(pid) == b"T"})
    return {pid for pid in find() - spared if alive(pid)} if quiet < _QUIET_LOOKS else set()


_QUIET_LOOKS = 3


def _reap_exited() -> bool:
    """Once we adopt orphans: reap every child of ours that has exited; True if any had.
    (Only the `grade` command adopts orphans, and its only children are the kernel and
    what it left behind: no other Popen of ours loses its exit status.)"""
    if not _adopting:
        return False
    reaped = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped = True


def keep_private() -> None:
    """Make this process non-dumpable (Linux): other processes of the same user can then
    no longer read its /proc entries (environment, memory, file descriptors)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
