"""CPU of a command's whole process tree, counted in a cgroup of its own.

A kernel that a command starts may be re-parented away from it (into bubblewrap's PID
namespace, to init, to a subreaper), so getrusage of the waited children misses it. Here
each command runs in a fresh cgroup (cgroup v2 where one can be made, else v1's cpuacct;
below this process's own cgroup, else the hierarchy's root), joined by the child before it
execs, and the group's CPU is read when the command ends. Where no cgroup can be made
(not root, no cgroup mounted), `Counting.label` says so and CPU is getrusage's.

On a machine whose memory controller is cgroup v2's, `grade` makes the kernel's memory
cgroup below its own only where its own group has the controller enabled for children,
which a fresh counting group has not: there the kernel gets the address-space cap alone
(`--memory-limit`), a few milliseconds cheaper to set up. Where memory is cgroup v1's (as
with v2 mounted beside v1), the two do not meet.

    counting = Counting()
    done = run_counted(["grade", "nb.ipynb"], counting)  # done.cpu_s, done.rusage_cpu_s

Used by bench_template.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Counted:
    """One run of a command: wall seconds; CPU seconds of its whole tree (the cgroup's
    count, or getrusage's where there is no cgroup); getrusage's own (the command and the
    children it waited for); the command lines of processes it left running (killed);
    its exit code, stdout and stderr."""

    wall_s: float
    cpu_s: float
    rusage_cpu_s: float
    leftovers: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes


class Group:
    """A fresh cgroup that one command runs in: it counts every process the command
    starts, whichever parent they end up with."""

    def __init__(self, folder: Path, usage: str) -> None:
        self.folder, self.usage = folder, usage

    def enter(self) -> None:
        """Move the calling process into the group (a Popen preexec_fn: runs in the child)."""
        with open(self.folder / "cgroup.procs", "w") as procs:
            procs.write(str(os.getpid()))

    def cpu_s(self) -> float:
        text = (self.folder / self.usage).read_text()
        if self.usage == "cpuacct.usage":
            return int(text) / 1e9
        return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

    def close(self) -> tuple[float, list[str]]:
        """(CPU seconds, command lines of processes still in the group 1 s after the
        command ended: they are killed, they are the command's own); removes the group."""
        left: dict[int, str] = {}
        grace = time.monotonic() + 1.0
        while (pids := self._pids()) and time.monotonic() < grace + 5.0:
            if time.monotonic() >= grace:
                for pid in pids:
                    left.setdefault(pid, _cmdline(pid))
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        cpu = self.cpu_s()
        for _ in range(100):
            try:
                self.folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
        return cpu, list(left.values())

    def _pids(self) -> list[int]:
        return [int(p) for p in (self.folder / "cgroup.procs").read_text().split()]


class Counting:
    """How this run counts a command's CPU: in a fresh cgroup per command (v2 where one
    can be made, else v1's cpuacct) or, failing both, with getrusage."""

    def __init__(self) -> None:
        self.parent: Path | None = None
        self.usage = ""
        self.label = "getrusage of the waited children (no cgroup could be made: kernels "
        self.label += "re-parented away are missed)"
        self._made = 0
        for parent, usage, label in _cgroup_parents():
            self.parent, self.usage = parent, usage
            if self._probe():
                self.label = f"a cgroup ({label}) per command, below {parent}"
                return
        self.parent = None

    def group(self) -> Group | None:
        if self.parent is None:
            return None
        self._made += 1
        folder = self.parent / f"bench-template-{os.getpid()}-{self._made}"
        folder.mkdir()
        return Group(folder, self.usage)

    def _probe(self) -> bool:
        """Whether a child can be started in a group here and its CPU is counted."""
        try:
            group = self.group()
        except OSError:
            return False
        assert group is not None
        try:
            subprocess.run(
                [sys.executable, "-c", "sum(range(2_000_000))"], preexec_fn=group.enter, check=True
            )
            return group.close()[0] > 0
        except (OSError, subprocess.SubprocessError, KeyError, ValueError):
            with contextlib.suppress(OSError):
                group.folder.rmdir()
            return False


def _cgroup_parents() -> list[tuple[Path, str, str]]:
    """Where a counting cgroup may go: below this process's own cgroup, then the
    hierarchy's root; cgroup v2 first, then v1's cpuacct."""
    v2 = v1 = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            kind, options = fields[fields.index("-") + 1], fields[-1].split(",")
            if kind == "cgroup2" and v2 is None:
                v2 = Path(fields[4])
            elif kind == "cgroup" and "cpuacct" in options and v1 is None:
                v1 = Path(fields[4])
    own = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            own[controllers] = path.lstrip("/")
    v1_own = next((p for c, p in own.items() if "cpuacct" in c.split(",")), "")
    found: list[tuple[Path, str, str]] = []
    for mount, path, usage, label in (
        (v2, own.get("", ""), "cpu.stat", "v2"),
        (v2, "", "cpu.stat", "v2"),
        (v1, v1_own, "cpuacct.usage", "v1, cpuacct"),
        (v1, "", "cpuacct.usage", "v1, cpuacct"),
    ):
        if mount is not None and (mount / path, usage, label) not in found:
            found.append((mount / path, usage, label))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return f"pid {pid}"


def run_counted(command: list[str], counting: Counting) -> Counted:
    """Run `command` (stdin empty, stdout and stderr kept) in a fresh process and group."""
    group = counting.group()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=group.enter if group else None,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        rusage_cpu = usage.ru_utime + usage.ru_stime
        cpu, left = group.close() if group else (rusage_cpu, [])
        out.seek(0)
        err.seek(0)
        return Counted(wall, cpu, rusage_cpu, left, proc.returncode, out.read(), err.read())
