"""Programs that work for the graded calls: CPU time spent, while the hidden tests run, by
processes of the grading other than the kernel itself, read from /proc outside the kernel.

A notebook may leave a program running (`subprocess.Popen(["sleep", "600"])`, a server it
wrote): that alone is a note on the card. What is evidence is a program that works while
the graded calls run: the grader samples every process of the session (the kernel's tree,
its sandbox, and whatever carries the session's token) when the hidden tests start and
again when it judges, and counts the CPU time each used meanwhile, with that of the
processes that ended and were reaped meanwhile (their CPU time lands in their reaper's
count). The kernel's own time is not counted: it is the graded calls themselves. However a
program was started (a shell, `subprocess`, a raw `fork`, a forked copy of the kernel),
it is in the session's process tree or namespace, and its time is counted.
"""

from __future__ import annotations

import os

from grader.kernel import processes as procs

# Below this, a program idled: a clock tick or two of bookkeeping is not work.
WORK_SECONDS = 0.03
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

Sample = dict[int, tuple[int, int, int]]  # pid -> (parent, own ticks, reaped children's ticks)


def sample(launched: tuple[int, ...], token: str) -> Sample:
    """The CPU counts of every process of the session (`launched`: the processes the
    session started, the kernel or its sandbox, and a forked kernel's sandbox)."""
    pids = set(launched) | procs.tagged(token) | procs.descendants(*launched)
    found = {}
    for pid in pids:
        ticks = procs.cpu_ticks(pid)
        if ticks is not None:
            found[pid] = ticks
    return found


def work(before: Sample, now: Sample, kernel: int) -> tuple[float, str]:
    """(seconds of CPU the session's other processes used between the two samples, the
    command line of the one that used most, or "" if the time is that of programs that
    ended). `kernel`: the kernel's pid (its time, and its sandbox's, are not counted;
    what they reaped is).

    A kernel that died between the samples was reaped by a process of its line (the
    sandbox) or by the grader, and its whole life's CPU then lands in that reaper's count:
    that count then says nothing of other programs, so only the programs still running
    are counted (a kernel that dies costs the test that killed it anyway)."""
    line = _line(now, kernel) | _line(before, kernel)
    total = 0
    if kernel in now:
        reaped = sum(now[p][2] - before.get(p, now[p])[2] for p in line if p in now)
        ended = sum(own + children for p, (_, own, children) in before.items()
                    if p not in now and p not in line)  # fmt: skip
        total = max(0, reaped - ended)
    top, top_ticks = "", 0
    for pid, (_, own, children) in now.items():
        if pid in line:
            continue
        _, own0, children0 = before.get(pid, (0, 0, 0))
        ticks = max(0, own + children - own0 - children0)
        total += ticks
        if ticks > top_ticks:
            top, top_ticks = procs.command_line(pid) or f"process {pid}", ticks
    return total / _TICK, top if top_ticks * 2 >= total else ""


def _line(found: Sample, kernel: int) -> set[int]:
    """The kernel and the processes above it within the session (its sandbox), as found in
    one sample."""
    line, pid = set(), kernel
    while pid in found and pid not in line:
        line.add(pid)
        pid = found[pid][0]
    return line


def finding_message(seconds: float, command: str) -> str:
    """What the card says of a program that worked during the hidden tests."""
    who = f"a program the notebook started ({command})" if command else (
        "programs the notebook started, which ended meanwhile"
    )  # fmt: skip
    return f"{who} used {seconds:.2f} s of CPU while the hidden tests ran"
