"""Killing what a notebook started, with real processes (no kernel).

Each scenario runs in a fresh Python that adopts orphans, as `grade` does (a test process
that became a subreaper would reap other tests' children). A walking process, one that
forks and exits a thousand times a second, shows it is alive by touching a heartbeat file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.kernel import processes as procs
from tests.helpers import ROOT

WALK = (
    "import os, sys\n"
    "while True:\n"
    "    os.utime(sys.argv[1]) if os.path.exists(sys.argv[1]) else open(sys.argv[1], 'w').close()\n"
    "    if os.fork():\n"
    "        os._exit(0)\n"
)
SCENARIO = """
import os, subprocess, sys, time
from grader.kernel import processes as procs
procs.adopt_orphans()
beat, kind = sys.argv[1], sys.argv[2]
env = {**os.environ, "GRADER_SESSION": "walk-test"}
if kind == "walk":
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    subprocess.Popen([sys.executable, "-c", WALK, beat], start_new_session=True, **quiet)
else:  # a parent with two sleeping children
    subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], env=env)
time.sleep(0.5)
find = lambda: procs.tagged("walk-test") | procs.adopted()
started = time.monotonic()
left = procs.kill_until_none(find)
print(time.monotonic() - started, len(left), flush=True)
"""


def _run(tmp_path: Path, kind: str) -> tuple[float, Path]:
    beat = tmp_path / "heartbeat"
    code = f"WALK = {WALK!r}\n" + textwrap.dedent(SCENARIO)
    done = subprocess.run(
        [sys.executable, "-c", code, str(beat), kind],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return float(done.stdout.split()[0]), beat


def _beating(beat: Path) -> bool:
    if not beat.exists():
        return False
    before = beat.stat().st_mtime_ns
    time.sleep(0.3)
    return beat.stat().st_mtime_ns != before


@pytest.fixture
def cleanup(tmp_path):
    yield
    # whatever survived dies with its heartbeat folder: the walker exits when it cannot write
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_walking_process_is_killed(tmp_path, cleanup):
    seconds, beat = _run(tmp_path, "walk")
    assert not _beating(beat)
    assert seconds < 10


def test_the_ordinary_case_is_quick(tmp_path, cleanup):
    seconds, _ = _run(tmp_path, "family")
    assert procs.tagged("walk-test") == set()
    assert seconds < 5  # a generous bound; it is milliseconds (see the printed figure)


def test_nothing_to_kill_returns_at_once():
    started = time.monotonic()
    assert procs.kill_until_none(set) == set()
    assert time.monotonic() - started < 1


def test_the_caller_and_its_ancestors_are_spared():
    mine = {os.getpid(), os.getppid()}
    assert procs.kill_until_none(lambda: set(mine), bound=1) == set()


def test_a_kernel_pid_given_to_another_process_is_spared():
    """A kernel's line is known by pid and start time: once the system has given the number
    to another process (a walking process goes through the pids in seconds), say another
    grading's new kernel, killing the old kernel's line leaves that one alone."""
    from grader.kernel.process import kill_all

    other = subprocess.Popen(["sleep", "300"])
    try:
        start = procs.started(other.pid)
        assert start is not None and procs.identities((other.pid,)) == {other.pid: start}
        kill_all("no-such-session", {other.pid: start - 1})  # the number, an older process
        assert other.poll() is None
        kill_all("no-such-session", {other.pid: start})  # the process itself
        assert not procs.alive(other.pid)  # (and reaped by kill_all, as its parent's)
    finally:
        other.kill()
        other.wait()


REAPING = """
import os, subprocess, sys, time
from grader.kernel import processes as procs
procs.adopt_orphans()
beat = sys.argv[1]
ours = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
with procs.spawning() as own:  # a child in a session of its own, as a cold kernel is
    leader = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"], start_new_session=True)
    own(leader.pid)
walker = subprocess.Popen([sys.executable, "-c", WALK, beat], start_new_session=True)
most = 0
for _ in range(40):  # two seconds of a walk: orphans exiting by the thousand
    time.sleep(0.05)
    mine = [p for p in procs._pids() if (procs._stat_fields(p) or [b"", b"0"])[1] == str(os.getpid()).encode()]
    most = max(most, sum(procs._state(p) == b"Z" for p in mine))
statuses = ours.wait(), leader.wait()  # (after two seconds of the reaper at work)
walker.kill(); walker.wait()
procs.kill_until_none(procs.adopted)
print(most, *statuses, flush=True)
"""


def test_adopted_orphans_are_reaped_as_they_exit_and_our_children_keep_their_status(
    tmp_path, cleanup
):
    """A grader that adopts orphans reaps them as they exit: a walking process leaves one
    behind per step, a thousand a second, and as zombies they would take every pid of the
    machine in seconds (other gradings' kernels then cannot start a thread). Its own
    children, in its session or started under `spawning`, keep their exit status."""
    code = f"WALK = {WALK!r}\n" + REAPING
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "heartbeat")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    most, ours, leader = (int(x) for x in done.stdout.split())
    assert (ours, leader) == (3, 5)
    assert most < 500, f"{most} exited orphans left unreaped at once"
