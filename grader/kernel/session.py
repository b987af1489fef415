"""The session: one grading's kernel, and every decision about it.

A `Session` owns the scratch space, the guard's record channel, the deadline and its
watchdog, and the kernel process of the moment (`KernelProcess`). It runs the notebook's
cells and carries the hidden suite's calls through the call channel (`Channel`). The parts
below it only report what happened; recovery lives here, in one place (`_recover`): after
a timeout the kernel is interrupted and probed, and a kernel that does not come back, or
dies, is replaced by a fresh one that replays the cells that ran to completion. The
session counts every restart. Nothing the kernel prints is read.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import select
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from grader.core.errors import KernelDiedAtStart, KernelStartError
from grader.core.limits import Limits
from grader.core.outcomes import CallTimeout, KernelCrashed, NoAnswer, Status
from grader.core.records import Finding, Kind, RecordReader
from grader.core.signals import check, held
from grader.kernel import companions, wire
from grader.kernel import processes as procs
from grader.kernel.cells import CellRun, Execution, cell_run
from grader.kernel.channel import (
    F_SETPIPE_SZ,
    MAX_NESTING,
    MAX_STRUCTURE_BYTES,
    MAX_TENSOR_BYTES,
    PIPE_BYTES,
    Request,
)
from grader.kernel.launch import (
    environment_changes,
    environment_snapshot,
    guard_config,
    install_code,
    sandboxed,
    scratch_root,
)
from grader.kernel.process import KernelProcess, OutputBudget, kill_all

log = logging.getLogger("grader.kernel")

# How long past the grading's deadline the watchdog lets the grader wind down on its own
# before it kills the kernel.
WATCHDOG_GRACE = 5.0


class Session:
    """A candidate kernel for the length of one grading.

    Use as a context manager: entering launches the kernel process (without waiting for
    it, so the grader can load its suites meanwhile); `prepare` then installs the shim and
    runs the cells (see `cells`); leaving kills the kernel and every process it started
    and removes the scratch space. A session may be entered before its notebook is known
    (a kernel started ahead of need) and given it, with its deadline, by `assign`.
    """

    def __init__(
        self,
        sources: list[tuple[int, str]],
        limits: Limits,
        deadline: float | None = None,
    ) -> None:
        self.sources = sources
        self.limits = limits
        self.deadline = (
            deadline if deadline is not None else time.monotonic() + limits.total_timeout
        )
        self.cells: list[CellRun] = []
        self.restarts = 0
        self.start_retries = 0  # kernels that died before they answered (see `_connect`)
        self.calls = 0
        self._watch: dict[str, object] = {}
        self._packages: tuple[str, ...] = ()
        self._reader = RecordReader(sources)
        self._host_pids: dict[tuple[int, int], int | None] = {}
        self._token = secrets.token_hex(8)
        self._process: KernelProcess | None = None
        self._cell_ids: dict[int, str] = {}
        cell, total = limits.output_budget
        self._budget = OutputBudget(cell, total)
        self._wake_r = self._wake_w = -1  # set by _open: wakes the watchdog to end
        self._watchdog_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # set by _open: the scratch space and the record channel
        self._root: Path | None = None
        self._environment: dict[str, int] = {}
        self._records = self._records_w = -1
        self._records_inode = 0
        # the session's processes when the hidden tests started (see companions)
        self._tests_began: companions.Sample | None = None
        self._work_noted = False
        self._testing = False  # between the end of the cells and `end_tests`

    def __enter__(self) -> Session:
        try:
            with held():  # everything `close` undoes exists before a signal can stop us
                self._open()
            self._launch()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def assign(self, sources: list[tuple[int, str]], deadline: float) -> None:
        """Give a session entered ahead of need its notebook's cells and its deadline
        (before `prepare`: nothing of a notebook has run in it yet)."""
        self.sources = sources
        self._reader = RecordReader(sources)
        self.deadline = deadline
        with contextlib.suppress(OSError):  # the watchdog sleeps until the old deadline
            os.write(self._wake_w, b"d")

    @property
    def expired(self) -> bool:
        """Whether the grading's deadline has passed."""
        return time.monotonic() >= self.deadline

    @property
    def workdir(self) -> Path:
        """The kernel's working folder (emptied for every kernel)."""
        return (self._root or Path()) / "work"

    def prepare(
        self,
        watch: dict[str, object] | None = None,
        packages: tuple[str, ...] = ("numpy", "einops"),
    ) -> None:
        """Wait for the kernel, install the guard and the shim (watching what `watch`, an
        exercise's `Watch.kernel_config()`, names; the notebook may import the standard
        library, torch and `packages`; the suite's calls run on `limits.device`), and run
        the notebook's cells.

        Raises:
            KernelStartError: the kernel did not come up.
        """
        self._watch = dict(watch or {})
        self._packages = packages
        self._connect()
        self._run_cells()

    @property
    def seen(self) -> set[str]:
        """Watched built-ins the guard saw called during hidden tests."""
        self._read_records()
        return self._reader.seen

    @property
    def findings(self) -> list[Finding]:
        """Everything the guard reported, in order (see grader.core.records), and whether
        another process worked while the hidden tests ran (see companions)."""
        self._read_records()
        self._measure_work()
        return list(self._reader.findings)

    # -- calls from the hidden suite -------------------------------------------------

    def call(self, request: Request, timeout: float | None = None) -> dict[str, Any]:
        """Send one request to the shim and return its answer.

        Raises:
            CallTimeout: the call ran past its limit (or the grading past its own).
            KernelCrashed: the kernel died (a fresh one is already running).
            NoAnswer: the kernel gave no answer the grader can read.
        """
        check()  # a stopping signal whose exception was lost stops the grading here
        process = self._process
        if process is None or not process.running:  # the deadline passed, the kernel is gone
            raise CallTimeout(f"grading passed its {self.limits.total_timeout:g} s limit")
        self.calls += 1
        payload = wire.pack(request)
        left = max(1.0, self.deadline - time.monotonic())
        limit = min(timeout or self.limits.call_timeout, left)
        run = process.call(payload, limit)
        if run.restart_loop:  # out of step: interrupt, so that the loop starts afresh
            self._recover(replace(run, status=Status.TIMEOUT), interrupt=True)
        else:
            run = self._recover(run, interrupt=True)
        self._read_records()
        if run.status == Status.CRASHED and self.expired:
            self._stop()
            raise CallTimeout(f"grading passed its {self.limits.total_timeout:g} s limit")
        if run.status == Status.CRASHED:
            raise KernelCrashed()
        if run.status == Status.TIMEOUT:
            raise CallTimeout(f"a call into the candidate's code ran past the {limit:g} s limit")
        if run.status == Status.ERROR:
            raise NoAnswer(run.message)
        answer = read_answer(run.answer)
        if answer.get("tampered"):
            self._reader.add(
                Finding(
                    Kind.TAMPER, "the kernel redirected the grader's record channel during a call"
                )
            )
        return answer

    # -- recovery: the one place that interrupts, restarts and replays --------------

    def _recover(self, run: Execution, interrupt: bool) -> Execution:
        """What a timeout or a dead kernel leads to. A timeout: the kernel is interrupted
        (cells: nbclient has done it) and probed; if it does not come back it is replaced,
        and the run stays a timeout. A dead kernel is replaced. The run is returned as the
        report should see it."""
        if run.status == Status.TIMEOUT:
            assert self._process is not None
            if interrupt:
                self._process.interrupt()
            if self._process.settled():
                return run
            self.restart()  # the interrupt did not take
        elif run.status == Status.CRASHED:
            self.restart()
        return run

    def restart(self) -> None:
        """Replace the kernel with a fresh one and replay the cells that ran to completion,
        all within the grading's deadline (none once it has passed: calls then time out
        at once). Every restart is counted here.

        Raises:
            KernelStartError: the fresh kernel did not start (before the deadline).
        """
        self._measure_work()
        self._stop()
        self._drain()
        self._reader.testing = False  # the replay is the notebook's own cells
        if self.expired:
            return
        self.restarts += 1
        try:
            self._start()
        except KernelStartError:
            if self.expired:  # the watchdog ended the start
                self._stop()
                return
            raise
        self._replay()
        if self._testing:
            self._begin_tests()

    def _replay(self) -> None:
        """Run again, without keeping output, the cells that ran to completion. A replayed
        cell that does not finish ends the replay (no restart within a restart)."""
        sources = dict(self.sources)
        assert self._process is not None
        for cell in self.cells:
            if cell.status not in (Status.PASSED, Status.ERROR):
                continue
            left = self.deadline - time.monotonic()
            if left <= 0:
                break
            limit = min(self.limits.cell_timeout, left)
            run = self._process.execute(sources[cell.index], limit, keep_output=False)
            if run.status == Status.CRASHED:
                break
            if run.status == Status.TIMEOUT and not self._process.settled():
                break

    # -- lifecycle --------------------------------------------------------------------

    def _open(self) -> None:
        """The scratch space, the record channel and the watchdog."""
        self._environment = environment_snapshot()
        self._root = scratch_root()
        # The guard's record channel: the kernel holds the writing end, we read.
        self._records, self._records_w = os.pipe()
        with contextlib.suppress(OSError):  # room for bursts between drains (Linux)
            fcntl.fcntl(self._records_w, F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self._records, False)
        self._records_inode = os.fstat(self._records).st_ino
        self._wake_r, self._wake_w = os.pipe()
        watchdog = threading.Thread(target=self._watchdog, name="grader-watchdog", daemon=True)
        watchdog.start()
        self._watchdog_thread = watchdog

    def _watchdog(self) -> None:
        """The watchdog, a thread of its own: it drains the record channel whenever the
        guard writes (so the guard never waits on a full pipe) and, once the deadline is
        well past, kills the kernel and everything it started, so that no wait on the
        kernel (a replay, a start, an interrupt it ignores) outlasts --timeout: the main
        thread then finds the kernel dead and winds down. It sleeps in `select` between
        events; `close` wakes it to end, `assign` to look at a new deadline."""
        while True:
            left = self.deadline + WATCHDOG_GRACE - time.monotonic()
            if left <= 0:
                process = self._process
                kill_all(
                    self._token,
                    (process.line or procs.identities(process.pids))
                    if process is not None
                    else None,
                )
                left = 1.0  # past the deadline: look again in a second, until closed
            ready, _, _ = select.select([self._records, self._wake_r], [], [], left)
            if self._wake_r in ready and b"x" in os.read(self._wake_r, 64):
                return  # `close`; any other byte: the deadline moved (`assign`)
            if self._records in ready:
                self._drain()

    def _end_watchdog(self) -> None:
        """Wake the watchdog and wait for it to end (before the pipes it watches close)."""
        if self._watchdog_thread is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._watchdog_thread is not threading.current_thread():
            self._watchdog_thread.join()
        self._watchdog_thread = None

    def _start(self) -> None:
        self._launch()
        self._connect()

    def _launch(self) -> None:
        assert self._root is not None
        self._process = KernelProcess(
            self._root, self._token, self._records_w, self.limits, self._budget
        )
        self._process.launch()

    def _connect(self) -> None:
        """Wait for the launched kernel and install the guard and the shim. A kernel that
        exits before it answers has run nothing of the notebook: another is started in its
        place, once (counted in `start_retries`); a second such death in a row is the
        grading's error.

        Raises:
            KernelStartError: the kernel did not come up.
        """
        try:
            self._install()
        except KernelDiedAtStart as e:
            if self.expired:
                raise
            self.start_retries += 1
            log.info("%s; starting another", str(e).removeprefix("could not start the kernel: "))
            self._launch()
            try:
                self._install()
            except KernelDiedAtStart as again:
                raise KernelDiedAtStart(f"{again}, twice in a row") from None

    def _install(self) -> None:
        assert self._process is not None
        config = {
            **guard_config(self.workdir, [], self._packages),
            "channel": list(self._process.channel.kernel_fds),
            "max_tensor_bytes": MAX_TENSOR_BYTES,
            "max_structure_bytes": MAX_STRUCTURE_BYTES,
            "watch": self._watch,
            "device": self.limits.device,  # where the suite's calls run (the shim moves tensors)
            # sandboxed, the operating system holds what the guard's path checks hold
            # without it (/proc read-only, the grader's folders absent)
            "sandboxed": sandboxed(self.limits),
        }
        cell, total = self.limits.output_budget
        install = install_code(
            f"_grader_shim_{self._process.tag}", self._records_w, config, cell + 64, total + 64
        )
        self._process.connect(install)

    def _stop(self) -> None:
        """Kill the kernel and every process it started."""
        if self._process is not None:
            self._process.stop()
        else:
            kill_all(self._token)

    def close(self) -> None:
        """Kill the kernel and everything it started; remove the scratch space; say if the
        grading environment changed meanwhile. Runs to the end whatever signal arrives."""
        with held():
            self._end_watchdog()
            with contextlib.suppress(Exception):  # never in the way of the cleanup
                self._measure_work()
            self._stop()
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
            with self._lock:
                if self._records >= 0:
                    changed = environment_changes(self._environment, environment_snapshot())
                    if changed:
                        self._reader.add(
                            Finding(Kind.ENVIRONMENT, f"the grading environment changed: {changed}")
                        )
                for fd in (self._records, self._records_w, self._wake_r, self._wake_w):
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                self._records = self._records_w = self._wake_r = self._wake_w = -1

    # -- the notebook's cells ---------------------------------------------------------

    def _run_cells(self) -> None:
        self.cells = []
        for index, source in self.sources:
            check()
            left = self.deadline - time.monotonic()
            if left <= 0:
                message = f"not run: grading passed its {self.limits.total_timeout:g} s limit"
                self.cells.append(CellRun(index, Status.SKIPPED, message))
                continue
            assert self._process is not None
            run = self._process.execute(source, min(self.limits.cell_timeout, left), True)
            self._cell_ids[index] = self._process.last_message_id
            cell = cell_run(index, self._recover(run, interrupt=False), self.limits.cell_timeout)
            self.cells.append(cell)
        self._count_cut_output()
        self._begin_tests()

    # -- programs that work for the graded calls (see companions) -------------------

    def _session_pids(self) -> tuple[tuple[int, ...], int] | None:
        """(the kernel's line as launched, the kernel's pid), both as seen here."""
        process = self._process
        self._read_records()
        if process is None or process.pid is None or not process.running or not self._reader.pids:
            return None
        kernel = self._kernel_host_pid(process)
        return None if kernel is None else (process.pids, kernel)

    def _begin_tests(self) -> None:
        """The hidden tests start now: what the guard sent so far is the notebook's own
        cells; from here on, a built-in it sees is the graded calls' (the kernel holds no
        say in which phase a sighting falls). Sample every process of the session."""
        self._read_records()
        self._testing = self._reader.testing = True
        pids = self._session_pids()
        self._tests_began = companions.sample(pids[0], self._token) if pids else None

    def end_tests(self) -> None:
        """The hidden tests are over (the profile, which is never scored, may follow)."""
        self._read_records()
        self._measure_work()
        self._testing = self._reader.testing = False

    def _measure_work(self) -> None:
        """Record, once, that programs other than the kernel used CPU while the hidden
        tests ran: the graded calls talk to them (evidence, see grader.core.records)."""
        if self._tests_began is None or self._work_noted:
            return
        pids = self._session_pids()
        if pids is None:
            return
        now = companions.sample(pids[0], self._token)
        seconds, command = companions.work(self._tests_began, now, pids[1])
        if seconds >= companions.WORK_SECONDS:
            self._work_noted = True
            self._reader.add(Finding(Kind.MACHINERY, companions.finding_message(seconds, command)))

    def _count_cut_output(self) -> None:
        """Add what the shim dropped at the source to each cell's count of cut output."""
        try:
            cut = self.call({"op": "output_cut"}).get("value")
        except (CallTimeout, KernelCrashed, NoAnswer):
            return
        if not isinstance(cut, dict):
            return
        self.cells = [
            replace(c, output_cut=c.output_cut + _count(cut.get(self._cell_ids.get(c.index, ""))))
            for c in self.cells
        ]

    # -- the guard's records ----------------------------------------------------------

    def _read_records(self) -> None:
        """Take what the guard wrote; check that the kernel still holds the channel."""
        self._drain()
        self._check_channel()

    def _drain(self) -> None:
        with self._lock:
            while self._records >= 0:
                try:
                    data = os.read(self._records, 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                self._reader.feed(data)

    def _check_channel(self) -> None:
        """The kernel's ends of the record channel and of the call channel must still be
        the pipes we gave it: a kernel that redirects one (os.dup2, os.close) is tampering
        with the grader. Read from /proc, outside the kernel's reach."""
        process = self._process
        if process is None or not process.running or not self._reader.pids:
            return
        pid = self._kernel_host_pid(process)
        if pid is None:
            return
        ends = {self._records_w: self._records_inode, **process.channel.inodes}
        for fd, inode in ends.items():
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                link = ""
            if link != f"pipe:[{inode}]" and procs.alive(pid):
                what = "record" if fd == self._records_w else "call"
                self._reader.add(
                    Finding(Kind.TAMPER, f"the kernel redirected the grader's {what} channel")
                )

    def _kernel_host_pid(self, process: KernelProcess) -> int | None:
        """The kernel's process id as this process sees it (a sandbox has its own PID
        namespace: the guard reports the id inside it)."""
        launched = process.pid
        if launched is None:
            return None
        key = (launched, self._reader.pids[-1])
        if key not in self._host_pids:
            inside = {launched} | procs.descendants(launched)
            self._host_pids[key] = procs.host_pid(key[1], inside)
        return self._host_pids[key]


def _count(value: object) -> int:
    """A count the kernel sent (the candidate may have forged it): a non-negative int or 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def read_answer(payload: bytes) -> dict[str, Any]:
    """The answer a payload carries, within the channel's bounds (structure, tensors,
    nesting).

    Raises:
        NoAnswer: the payload is not an answer the grader accepts.
    """
    try:
        answer = wire.unpack(payload, MAX_STRUCTURE_BYTES, MAX_TENSOR_BYTES, MAX_NESTING)
    except wire.WireError as e:
        raise NoAnswer(str(e)) from None
    if not isinstance(answer, dict):
        raise NoAnswer("malformed answer")
    return answer
